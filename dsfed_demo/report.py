"""What the demo prints as it goes, kept for its ``--json`` file and its HTML report."""

from __future__ import annotations

from typing import Any, Callable

from dsfed_client.errors import FederatedCallError


class Report:
    """Prints results as it goes and keeps them for ``--json``."""

    def __init__(self) -> None:
        self.results: dict[str, Any] = {}
        self.validation: tuple[Any, dict[str, Any]] | None = None  # (ValidationReport, study info) for the HTML
        self.models: dict[str, Any] = {}  # ValidationReport by model label (Schalk et al.'s (2024) workflow)
        self.comparison: Any = None  # ModelComparison of the last two models

    def section(self, title: str) -> None:
        print(f"\n== {title}")

    def show(self, key: str, text: str, value: Any) -> None:
        print(f"   {text}")
        self.results[key] = value

    def attempt(self, key: str, label: str, run: Callable[[], tuple[str, Any]]) -> None:
        try:
            text, value = run()
        except FederatedCallError as exc:
            print(f"   {label}: REFUSED")
            for err in exc.failures.values():
                print(f"     - {err}")
            self.results[key] = {
                "refused": [
                    {"site": e.site, "function": e.function, "rule": e.rule, "message": e.message, "type": e.kind}
                    for e in exc.failures.values()
                ]
            }
            return
        self.show(key, f"{label}: {text}", value)
