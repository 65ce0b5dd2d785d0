"""Summary statistics."""


def mean(values: list[float]) -> float:
    """Return the arithmetic mean of ``values``.

    Raises:
        ValueError: if ``values`` is empty.
    """
    if not values:
        raise ValueError("mean of an empty list")
    return sum(values) / len(values)


def spread(values: list[float]) -> float:
    """Return the difference between the largest and the smallest value."""
    return max(values) - min(values)
