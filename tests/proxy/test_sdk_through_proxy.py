"""`evolvable.trajectory(...)` by default records through the proxy's HTTP API, so governance applies."""

from __future__ import annotations

from typing import Any

import pytest
from tests.proxy.conftest import ProxyServer

from evolvable.governance.tenants import TenantDirectory
from evolvable.governance.wiring import Governance
from evolvable.protocol.models import ChatMessage, CompletionChoice, TrajectoryStatus
from evolvable.sdk import RecordingError, trajectory
from evolvable.store import Store


@pytest.fixture
def governed(proxy_factory: Any, store: Store) -> tuple[ProxyServer, str, str]:
    """A governed proxy on each backend, a tenant key, and a metadata-only tenant's key."""
    directory = TenantDirectory(store.engine)
    directory.create_tenant("acme")
    directory.create_tenant("quiet", capture="metadata")
    acme, quiet = directory.issue_key("acme").key, directory.issue_key("quiet").key
    gov = Governance.for_store(store, admin_key="")
    server = proxy_factory(store, governor=gov.governor, authenticator=gov.authenticator)
    return server, acme, quiet


def _stored(server: ProxyServer, trajectory_id: str) -> Any:
    server.flush()
    return server.runtime.store.get_trajectory(trajectory_id)


def test_a_run_recorded_through_the_proxy_is_redacted_and_owned_by_the_keys_tenant(
    governed: tuple[ProxyServer, str, str],
) -> None:
    server, acme, _ = governed
    with trajectory(agent="support", task_input={"ticket": 7}, proxy_url=server.url, api_key=acme) as t:
        call = t.llm_call(
            model="m",
            request_messages=[ChatMessage(role="user", content="mail ann@example.com about order 7")],
            choices=[CompletionChoice(message=ChatMessage(role="assistant", content="Done."))],
        )
        tool = t.tool_call(tool_name="send_mail", arguments={"to": "ann@example.com"}, status="ok", llm_step_id=call.id)
        t.signal("process", 1.0, step=tool, source="verifier")
    late = t.signal("user_feedback", 1.0, label="thanks")  # after the block: late feedback
    stored = _stored(server, t.id)
    assert stored.tenant_id == "acme" and stored.agent == "support" and stored.status == TrajectoryStatus.completed
    assert [s.id for s in stored.steps] == [call.id, tool.id]
    assert "ann@example.com" not in stored.steps[0].request_messages[0].content
    assert "ann@example.com" not in str(stored.steps[1].arguments)
    assert [(s.kind, s.step_id) for s in stored.signals] == [("process", tool.id), ("user_feedback", None)]
    assert stored.signals[1].id == late.id


def test_consent_applies_to_sdk_runs(governed: tuple[ProxyServer, str, str]) -> None:
    server, _, quiet = governed
    with trajectory(agent="a", proxy_url=server.url, api_key=quiet) as t:
        t.message(content="private words")
    (step,) = _stored(server, t.id).steps
    assert step.content in (None, "", [])


def test_an_escaping_exception_fails_the_run_with_its_reason(governed: tuple[ProxyServer, str, str]) -> None:
    server, acme, _ = governed
    with pytest.raises(RuntimeError), trajectory(agent="a", proxy_url=server.url, api_key=acme) as t:
        raise RuntimeError("tool crashed")
    stored = _stored(server, t.id)
    assert stored.status == TrajectoryStatus.failed
    assert stored.metadata["end_reason"] == "RuntimeError: tool crashed"


def test_the_proxy_url_and_key_come_from_the_environment(
    governed: tuple[ProxyServer, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, acme, _ = governed
    monkeypatch.setenv("EVOLVABLE_PROXY_URL", server.url)
    monkeypatch.setenv("EVOLVABLE_API_KEY", acme)
    with trajectory(agent="env") as t:
        t.end("abandoned", reason="user left")
    stored = _stored(server, t.id)
    assert (stored.tenant_id, stored.status, stored.metadata["end_reason"]) == ("acme", "abandoned", "user left")


def test_refusals_are_clear_errors(governed: tuple[ProxyServer, str, str]) -> None:
    server, acme, _ = governed
    with pytest.raises(RecordingError, match="401"), trajectory(proxy_url=server.url, api_key="evk_wrong"):
        pass
    with pytest.raises(ValueError, match="tenant_id"), trajectory(proxy_url=server.url, tenant_id="acme"):
        pass
    with pytest.raises(RecordingError, match="cannot reach"), trajectory(proxy_url="http://127.0.0.1:9"):
        pass
    with trajectory(proxy_url=server.url, api_key=acme) as t, pytest.raises(ValueError, match="reason"):
        t.end("completed", score=3)
