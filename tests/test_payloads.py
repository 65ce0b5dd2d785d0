"""Webhook payloads for tests are GitHub's real examples, and every derived case still passes
GitHub's webhook schema."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import payloads
import pytest
from gidgethub import ValidationFailure
from gidgethub.sansio import Event, validate_event

SHA = "3f786850e387550fdab836ed7e6dc881de23001b"


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    """Paths where two JSON documents differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            out += _diff(a.get(key, "<missing>"), b.get(key, "<missing>"), f"{path}/{key}")
        return out
    return [] if a == b else [path]


def test_example_picks_first_with_action_or_by_index() -> None:
    first = payloads.example("pull_request", "opened")
    third = payloads.example("pull_request", "opened", index=2)
    assert first["action"] == third["action"] == "opened"
    assert first != third
    assert payloads.example("pull_request", "opened") == first  # a fresh copy each time
    first["action"] = "mutated"
    assert payloads.example("pull_request", "opened")["action"] == "opened"


def test_missing_examples_are_clear_errors() -> None:
    with pytest.raises(LookupError, match="no 'pull_request' example with action 'edited'"):
        payloads.example("pull_request", "edited")
    with pytest.raises(LookupError, match="index 9 is out of range"):
        payloads.example("pull_request", "synchronize", index=9)
    with pytest.raises(LookupError, match="no webhook examples for event 'nope'"):
        payloads.example("nope")


def test_changing_one_field_changes_only_that_field() -> None:
    base = payloads.example("pull_request", "synchronize")
    derived = payloads.pull_request_event("synchronize", author_association="FIRST_TIME_CONTRIBUTOR")
    assert _diff(base, derived) == ["/pull_request/author_association"]
    derived = payloads.pull_request_event("synchronize", head_sha=SHA)
    assert set(_diff(base, derived)) == {
        "/pull_request/head/sha",
        "/pull_request/statuses_url",
        "/pull_request/_links/statuses/href",
    }


PR_ACTIONS = sorted({a for a in payloads.actions("pull_request") if a is not None})


@pytest.mark.parametrize("action", PR_ACTIONS)
@pytest.mark.parametrize("head", ["same-repo", "fork", "fork-deleted"])
def test_every_derived_pull_request_is_schema_valid(action: str, head: str) -> None:
    payload = payloads.pull_request_event(
        action,
        number=42,
        title="Speed up the kernel",
        body="Fixes #1\n\nRFC-12",
        author="dana",
        author_association="FIRST_TIMER",
        head_sha=SHA,
        head_ref="fast-kernel",
        base_ref="release/2.1",
        labels=["gpu", "needs-rfc"],
        fork_owner=None if head == "same-repo" else "dana",
        fork_deleted=head == "fork-deleted",
        head_clone_url="file:///srv/git/dana-widgets.git",
        repo_full_name="acme/widgets",
        clone_url="file:///srv/git/widgets.git",
        installation_id=77,
        api_url="http://127.0.0.1:8123",
    )
    assert payloads.schema_errors("pull_request", payload) == []
    pr = payload["pull_request"]
    assert (payload["number"], pr["number"], pr["head"]["sha"], pr["base"]["ref"]) == (
        42,
        42,
        SHA,
        "release/2.1",
    )
    assert pr["url"] == "http://127.0.0.1:8123/repos/acme/widgets/pulls/42"
    assert [label["name"] for label in pr["labels"]] == ["gpu", "needs-rfc"]
    assert payload["installation"]["id"] == 77
    assert payload["sender"]["login"] == pr["user"]["login"] == "dana"
    assert (
        payload["repository"]["clone_url"] == pr["base"]["repo"]["clone_url"] == "file:///srv/git/widgets.git"
    )
    assert pr["base"]["repo"]["full_name"] == payload["repository"]["full_name"] == "acme/widgets"
    assert "api.github.com" not in repr(payload)
    if head == "fork":
        assert pr["head"]["repo"]["fork"] is True
        assert pr["head"]["repo"]["full_name"] == "dana/widgets"
        assert pr["head"]["repo"]["owner"]["login"] == "dana"
        assert pr["head"]["repo"]["clone_url"] == "file:///srv/git/dana-widgets.git"
        assert pr["head"]["repo"]["id"] != payload["repository"]["id"]
        assert pr["head"]["label"] == "dana:fast-kernel"
    elif head == "fork-deleted":
        assert pr["head"]["repo"] is None
    else:
        assert pr["head"]["repo"]["full_name"] == "acme/widgets"


@pytest.mark.parametrize("draft", [True, False])
def test_draft_flag_is_set(draft: bool) -> None:
    assert payloads.pull_request_event("opened", draft=draft)["pull_request"]["draft"] is draft


@pytest.mark.parametrize("action", ["created", "edited", "deleted"])
@pytest.mark.parametrize("on_pull_request", [True, False])
def test_every_derived_issue_comment_is_schema_valid(action: str, on_pull_request: bool) -> None:
    payload = payloads.issue_comment_event(
        action,
        body="/retest-gpu",
        commenter="erin",
        author_association="COLLABORATOR",
        comment_id=555,
        on_pull_request=on_pull_request,
        number=42,
        merged_at="2024-03-01T10:00:00Z" if on_pull_request else None,
        issue_author="dana",
        issue_author_association="CONTRIBUTOR",
        repo_full_name="acme/widgets",
        installation_id=77,
    )
    assert payloads.schema_errors("issue_comment", payload) == []
    comment, issue = payload["comment"], payload["issue"]
    assert (comment["body"], comment["user"]["login"], comment["author_association"]) == (
        "/retest-gpu",
        "erin",
        "COLLABORATOR",
    )
    assert payload["sender"]["login"] == "erin"
    assert (issue["number"], issue["user"]["login"], issue["author_association"]) == (
        42,
        "dana",
        "CONTRIBUTOR",
    )
    if on_pull_request:
        assert issue["pull_request"] == {
            "url": "https://api.github.com/repos/acme/widgets/pulls/42",
            "html_url": "https://github.com/acme/widgets/pull/42",
            "diff_url": "https://github.com/acme/widgets/pull/42.diff",
            "patch_url": "https://github.com/acme/widgets/pull/42.patch",
            "merged_at": "2024-03-01T10:00:00Z",
        }
        assert comment["html_url"] == "https://github.com/acme/widgets/pull/42#issuecomment-555"
    else:
        assert "pull_request" not in issue


@pytest.mark.parametrize("action", ["created", "completed", "rerequested", "requested_action"])
def test_every_derived_check_run_is_schema_valid(action: str) -> None:
    payload = payloads.check_run_event(
        action,
        head_sha=SHA,
        name="paritybot / gpu",
        app_id=4242,
        app_slug="paritybot",
        requested_action="rerun" if action == "requested_action" else None,
        repo_full_name="acme/widgets",
        installation_id=77,
    )
    assert payloads.schema_errors("check_run", payload) == []
    run = payload["check_run"]
    assert (payload["action"], run["head_sha"], run["app"]["id"], run["name"]) == (
        action,
        SHA,
        4242,
        "paritybot / gpu",
    )


@pytest.mark.parametrize(
    ("name", "action", "installation_id"),
    [
        ("ping", None, None),
        ("push", None, 77),
        ("installation", "created", 77),
        ("installation_repositories", "added", 77),
        ("check_suite", "requested", 77),
    ],
)
def test_other_events_are_schema_valid(name: str, action: str | None, installation_id: int | None) -> None:
    payload = payloads.event(name, action, installation_id=installation_id)
    assert payloads.schema_errors(name, payload) == []
    if installation_id is not None:
        assert payload["installation"]["id"] == installation_id


def test_a_derivation_that_breaks_the_schema_fails_loudly() -> None:
    with pytest.raises(payloads.PayloadSchemaError, match=r"(?s)pull_request\$opened.*author_association"):
        payloads.pull_request_event("opened", author_association="BOSS")
    with pytest.raises(payloads.PayloadSchemaError, match="installation"):
        payloads.event("ping", installation_id=1)  # GitHub's ping carries no installation
    with pytest.raises(payloads.PayloadSchemaError, match="auto_merge"):
        payloads.pull_request_event("opened", index=0)  # the oldest real example predates auto_merge


def test_signature_and_headers_are_what_gidgethub_accepts() -> None:
    payload = payloads.issue_comment_event(body="/retest-gpu")
    body, headers = payloads.delivery("issue_comment", payload, "s3cret")
    validate_event(body, signature=headers["X-Hub-Signature-256"], secret="s3cret")
    with pytest.raises(ValidationFailure):
        validate_event(body, signature=headers["X-Hub-Signature-256"], secret="other")
    event = Event.from_http({k.lower(): v for k, v in headers.items()}, body, secret="s3cret")
    assert (event.event, event.data["comment"]["body"]) == ("issue_comment", "/retest-gpu")
    again = payloads.webhook_headers(
        "issue_comment", body, "s3cret", delivery_id=headers["X-GitHub-Delivery"]
    )
    assert again["X-GitHub-Delivery"] == headers["X-GitHub-Delivery"]
    # The RFC 4231-style vector every HMAC-SHA256 implementation agrees on.
    fox = b"The quick brown fox jumps over the lazy dog"
    expected = "sha256=f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
    assert payloads.sign(fox, "key") == payloads.sign(fox, b"key") == expected


def test_clone_url_points_at_a_local_bare_repository(tmp_path: Path) -> None:
    bare = tmp_path / "widgets.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    payload = payloads.pull_request_event("opened", repo_full_name="acme/widgets", clone_url=bare.as_uri())
    target = tmp_path / "checkout"
    subprocess.run(["git", "clone", "-q", payload["repository"]["clone_url"], str(target)], check=True)
    assert (target / ".git").is_dir()
