"""Tool descriptions: targeted edits for a recurring argument error on one tool."""

from __future__ import annotations

import json
from typing import Any

from evolvable.control.decision import Proposal
from evolvable.control.evolvers.base import EvolveContext, HarnessCandidate, LeverUnavailable
from evolvable.control.models import Lever
from evolvable.errors import NotFound
from evolvable.protocol.models import StepStatus

MARK = " Arguments:"


class ToolDescriptionEvolver:
    lever = Lever.tool

    def propose(self, ctx: EvolveContext, proposal: Proposal) -> HarnessCandidate:
        name = proposal.target.get("tool")
        harness = ctx.active_harness
        spec = harness.tool(name) if name else None
        if spec is None or not name:
            raise LeverUnavailable(f"tool {name!r} is not described in the harness")
        example = self._successful_arguments(ctx, name)
        props = spec.parameters.get("properties", {}) if isinstance(spec.parameters, dict) else {}
        required = spec.parameters.get("required", list(props)) if isinstance(spec.parameters, dict) else []
        errors = list(proposal.evidence.get("errors", {}))[:1]
        parts = [spec.description.split(MARK)[0].rstrip()]
        if props:
            parts.append(
                f"{MARK} "
                + ", ".join(
                    f"{p} ({props[p].get('type', 'string')}{', required' if p in required else ''})" for p in props
                )
                + "; copy values exactly as written in the request."
            )
        if example is not None:
            parts.append(f"Example: {json.dumps({'tool': name, 'args': example})}.")
        if errors:
            parts.append(f"Common mistake to avoid: {errors[0]}.")
        description = " ".join(parts)
        if description == spec.description:
            raise LeverUnavailable(f"nothing new to say about tool {name!r}")
        tools = [t.model_copy(update={"description": description}) if t.name == name else t for t in harness.tools]
        return HarnessCandidate(
            harness.model_copy(update={"tools": tools}), f"tool: clarified {name} arguments", {"tool": name}
        )

    @staticmethod
    def _successful_arguments(ctx: EvolveContext, name: str) -> dict[str, Any] | None:
        for run in reversed(ctx.runs):
            if not run.success:
                continue
            try:
                t = ctx.store.get_trajectory(run.trajectory_id)
            except NotFound:
                continue
            for step in t.tool_calls():
                if step.tool_name == name and step.status == StepStatus.ok and isinstance(step.arguments, dict):
                    return step.arguments
        return None
