"""The repository index rows of one model (Triton's repository index extension): its
versions with their state and reason, as ``Server.repository_index`` lists them."""

from __future__ import annotations

from workbench.common.results import RepositoryIndexRow
from workbench.engine.models.registry import ModelEntry
from workbench.messages.types import ModelReadyState


def index_rows(name: str, entry: ModelEntry | None, loading: list[int] | None) -> list[RepositoryIndexRow]:
    """The repository index rows of one model (see ``Server.repository_index``);
    ``loading``: the versions its load in progress loads ([] while its config is read),
    None when it is not loading."""
    states: dict[int, tuple[str, str]] = {}
    if entry is not None:
        for version, state in entry.versions.items():
            ready = state.state is ModelReadyState.READY
            reason = entry.load_error if ready else state.reason
            states[version] = (state.state.value, reason)
    if loading is not None:
        serving = [v for v, (state, _) in states.items() if state == "READY"]
        if not loading and not serving:
            return [{"name": name, "state": ModelReadyState.LOADING.value}]
        for version in loading:
            if version not in serving:
                states[version] = (ModelReadyState.LOADING.value, "")
    if entry is None and not states:
        return [{"name": name}]
    if not states:
        row: RepositoryIndexRow = {"name": name, "state": "UNAVAILABLE"}
        if entry is not None and entry.reason:
            row["reason"] = entry.reason
        return [row]
    rows: list[RepositoryIndexRow] = []
    for version, (state_name, reason) in sorted(states.items()):
        row = {"name": name, "version": str(version), "state": state_name}
        if reason:
            row["reason"] = reason
        rows.append(row)
    return rows


__all__ = ["index_rows"]
