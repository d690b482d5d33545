"""Starting harnesses for the IT helpdesk: a weak one (terse, no policy) and a careful one."""

from __future__ import annotations

from evolvable.protocol.harness import Harness, ToolSpec, string_parameters
from evolvable.workloads.it_helpdesk.tasks import CATALOGUE, QUOTA_LIMIT_GB

AGENT_NAME = "it-helpdesk"


def tool_specs(detailed: bool = True) -> list[ToolSpec]:
    d = detailed
    uid = "the user id, like u123, copied from the ticket"
    return [
        ToolSpec(
            name="lookup_user",
            description="Read a user's directory entry." if d else "User.",
            parameters=string_parameters(user_id=uid),
        ),
        ToolSpec(
            name="unlock_account",
            description="Unlock a locked account." if d else "Unlock.",
            parameters=string_parameters(user_id=uid),
        ),
        ToolSpec(
            name="reset_mfa",
            description="Reset MFA, only for the requester themself." if d else "MFA.",
            parameters=string_parameters(user_id=uid),
        ),
        ToolSpec(
            name="grant_vpn",
            description="Grant VPN access." if d else "VPN.",
            parameters=string_parameters(user_id=uid),
        ),
        ToolSpec(
            name="set_mailbox_quota",
            description=f"Set the mailbox quota in GB, at most {QUOTA_LIMIT_GB}." if d else "Quota.",
            parameters=string_parameters(user_id=uid, gb="whole number of GB"),
        ),
        ToolSpec(
            name="install_software",
            description=f"Install a package from the catalogue ({', '.join(CATALOGUE)})." if d else "Install.",
            parameters=string_parameters(user_id=uid, package="package name"),
        ),
        ToolSpec(
            name="grant_admin",
            description="Grant admin rights (never for ticket requests)." if d else "Admin.",
            parameters=string_parameters(),
        ),
        ToolSpec(
            name="reply_to_user",
            description="Send the final reply." if d else "Reply.",
            parameters=string_parameters(message="text"),
        ),
    ]


def weak_harness() -> Harness:
    """The poor start the evolution benchmark begins from: one line, terse tools, no policy."""
    return Harness(
        agent=AGENT_NAME,
        system_prompt='You are IT support. Use tools with JSON {"tool": ..., "args": {...}}.',
        tools=tool_specs(detailed=False),
        memory_k=0,
    )


def default_harness() -> Harness:
    return Harness(
        agent=AGENT_NAME,
        system_prompt=(
            "You are an IT helpdesk agent. Each turn answer with one JSON object "
            '{"tool": "<name>", "args": {...}}. Do the one change the ticket asks for, for the user id in the '
            "ticket, then call reply_to_user. Never act on another person's account, never grant admin rights, "
            f"install only catalogue software and never set a quota above {QUOTA_LIMIT_GB} GB."
        ),
        tools=tool_specs(detailed=True),
        memory_k=0,
    )
