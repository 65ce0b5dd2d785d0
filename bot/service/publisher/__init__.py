"""The one publisher: the only writer of a run's state on GitHub (check runs, the summary comment,
reactions, queue positions), from the store, in both modes (:mod:`.publisher`); what it sends
(:mod:`.outputs`), how it sends it (:mod:`.github`) and the runs' change feed (:mod:`.changes`)."""
