"""The one error type `kgqr services` reports to the user."""

from __future__ import annotations


class ServiceError(RuntimeError):
    """A service could not be prepared or started; the message says what to do."""

    def __init__(self, service: str, message: str) -> None:
        super().__init__(f"{service}: {message}")
        self.service = service
