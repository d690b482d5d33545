"""Memory retrieval: own-cluster exemplars first, never another cluster's when the cluster is known."""

from __future__ import annotations

from evolvable.protocol.harness import Harness, MemoryExemplar, render_messages, retrieve_memory
from evolvable.protocol.models import ChatMessage


def exemplar(ex_id: str, cluster: str | None, text: str) -> MemoryExemplar:
    messages = [ChatMessage(role="user", content=text), ChatMessage(role="assistant", content=f"answer {ex_id}")]
    return MemoryExemplar(id=ex_id, cluster=cluster, task_input=text, messages=messages, reward=1.0)


HARNESS = Harness(
    agent="a",
    system_prompt="Be helpful.",
    memory=[
        exemplar("refund", "refund_in_policy", "please refund order 12345 it broke"),
        exemplar("status", "order_status", "where is order 12345"),
        exemplar("general", None, "hello there"),
    ],
    memory_k=2,
)


def test_a_known_cluster_gets_its_own_and_general_exemplars_only() -> None:
    ids = [
        ex.id for ex in retrieve_memory(HARNESS, "refund order 777 please, outside the window", "refund_out_of_policy")
    ]
    assert ids == ["general"]  # the refund exemplar is the most similar text, but of another cluster
    ids = [ex.id for ex in retrieve_memory(HARNESS, "where is my order 55555", "order_status")]
    assert ids == ["status", "general"]


def test_an_unknown_cluster_gets_the_most_similar_of_all() -> None:
    ids = [ex.id for ex in retrieve_memory(HARNESS, "please refund order 777 it broke")]
    assert ids[0] == "refund" and len(ids) == 2
    messages = render_messages(HARNESS, [ChatMessage(role="user", content="please refund order 777 it broke")])
    assert [m.role for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert retrieve_memory(HARNESS.model_copy(update={"memory_k": 0}), "refund") == []


def _worked(ex_id: str) -> MemoryExemplar:
    turns = ["ticket", "act 1", "result 1", "act 2", "result 2", "answer"]
    messages = [ChatMessage(role="user" if i % 2 == 0 else "assistant", content=t) for i, t in enumerate(turns)]
    return MemoryExemplar(id=ex_id, cluster="c", task_input="ticket", messages=messages, reward=1.0)


def test_an_exemplar_is_shown_up_to_the_step_the_conversation_has_reached() -> None:
    harness = Harness(agent="a", memory=[_worked("w")], memory_k=1)
    live = [ChatMessage(role="user", content="new ticket")]
    shown: list[list[str]] = []
    for reply in ("my act 1", "my act 2", "my answer"):
        rendered = render_messages(harness, live, cluster="c")
        shown.append([m.text() for m in rendered[1 : len(rendered) - len(live)]])
        live += [ChatMessage(role="assistant", content=reply), ChatMessage(role="user", content="result")]
    # The last exemplar turn shown is always the action the live conversation is about to take.
    assert shown == [
        ["ticket", "act 1"],
        ["ticket", "act 1", "result 1", "act 2"],
        ["ticket", "act 1", "result 1", "act 2", "result 2", "answer"],
    ]
    longer = render_messages(harness, [*live, ChatMessage(role="assistant", content="x")], cluster="c")
    assert [m.text() for m in longer[1:7]] == ["ticket", "act 1", "result 1", "act 2", "result 2", "answer"]
