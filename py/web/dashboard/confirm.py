"""What a confirmation page posts back: the bound of the dry run it showed.

"Cancel all matching" and "replay all" are two steps: the confirmation page shows the dry
run's exact count, and its form posts the dry run's ``as_of`` (the database time the count
was made at) back, so rows that arrive after the operator read the number are left alone.
A page rendered before ``as_of`` existed (a tab left open across an upgrade) posts
``up_to_id`` instead, which the API still honours. The API checks either value.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["confirmed_bound"]


def confirmed_bound(form: Mapping[str, str]) -> dict[str, str]:
    """The bound to pass on to the API, or an empty dict when the form has none."""
    for name in ("as_of", "up_to_id"):
        if form.get(name):
            return {name: form[name]}
    return {}
