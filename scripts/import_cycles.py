"""List import cycles between modules of `evolvable` (TYPE_CHECKING and function-local imports count).

`lint-imports` enforces the sibling rule; this shows every module-level cycle, with line numbers.
Run: `python scripts/import_cycles.py` (exit status 1 when a cycle exists).
"""

from __future__ import annotations

import sys

import grimp


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def main() -> int:
    graph = grimp.build_graph("evolvable", cache_dir=None)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    cycles = strongly_connected(edges)
    for cycle in cycles:
        print(f"cycle of {len(cycle)} modules:")
        for importer in cycle:
            for imported in sorted(edges[importer] & set(cycle)):
                lines = [d["line_number"] for d in graph.get_import_details(importer=importer, imported=imported)]
                print(f"  {importer} -> {imported} (line {', '.join(map(str, lines))})")
    print(f"{len(cycles)} cycle(s)")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
