"""Which queues a worker serves, and in which projects (issue 26: tenants).

A queue is named as ``--queue`` takes it:

- ``emails``: a queue of the worker's project (WorkerConfig.project_id; the default project
  when that is None);
- ``acme/emails``: a queue of project ``acme``, named by slug or by id;
- ``acme/*`` (or ``*``): every queue of that project, those created while the worker runs
  included (it reads its queues again at every heartbeat).

A worker serving several projects registers once in each (codity.register_worker takes one
project): each project lists it among its workers, and the jobs it takes from a project are
claimed, heartbeated, released and reaped under that registration, so that nothing of one
tenant is written under another's worker row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["QueueSpec", "Served", "registrations"]

EVERY_QUEUE = "*"


@dataclass(frozen=True, slots=True)
class QueueSpec:
    """One ``--queue`` as given: ``project`` None is the worker's own project, ``name`` None
    every queue of the project."""

    project: str | None
    name: str | None

    @classmethod
    def parse(cls, text: str) -> QueueSpec:
        """``name``, ``project/name``, ``project/*`` or ``*``; ValueError with a sentence for
        a person otherwise (a queue name never holds a slash, a project slug never does)."""
        project, slash, name = text.rpartition("/")
        if not name or (slash and not project) or "/" in project:
            raise ValueError(
                f"a queue must be given as NAME, PROJECT/NAME or PROJECT/*, got {text!r}"
            )
        return cls(project if slash else None, None if name == EVERY_QUEUE else name)


@dataclass(frozen=True, slots=True)
class Served:
    """A queue the worker claims from, once its project and registration are known."""

    queue_id: int
    name: str
    project_id: int
    worker_id: int


def registrations(
    specs: Iterable[QueueSpec], project_ids: Mapping[str | None, int]
) -> dict[int, list[str] | None]:
    """The registrations the specs call for, one per project (``project_ids``: each spec's
    project, resolved), in the order first named: the queue names to register with, or None
    for every queue of the project. A project named twice (by slug and by id) is one."""
    wanted: dict[int, list[str] | None] = {}
    for spec in specs:
        project_id = project_ids[spec.project]
        names = wanted.setdefault(project_id, [])
        if spec.name is None:
            wanted[project_id] = None
        elif names is not None and spec.name not in names:
            names.append(spec.name)
    return wanted
