"""Follow the policy file the scheduler was started with (in a pod: the ConfigMap the Helm
chart mounts, which the kubelet updates in place by swapping a symlink).

`poll()` reads the file when its bytes changed: a policy that validates is returned for the
scheduler to swap in between two cycles; one that does not is reported once (the caller logs
it and posts a Warning Event with the problems) and the running policy stays.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

from gpucarve.config.policy_build import load_policy
from gpucarve.core.policy import Policy
from gpucarve.core.problems import InvalidInput


def digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None  # mid-swap or gone: look again at the next poll


class PolicyReloader:
    def __init__(
        self,
        path: Path,
        catalogs: Sequence[Path],
        on_invalid: Callable[[InvalidInput], None],
        loaded: str | None = None,
    ) -> None:
        """`loaded`: the digest (`digest(path)`) of the file as the running policy was read
        from it; a standby that waited for the lease must not take a later file for it."""
        self.path = path
        self.catalogs = list(catalogs)
        self.on_invalid = on_invalid
        self._seen = loaded if loaded is not None else digest(path)
        self.reloads = 0
        self.refused = 0

    def poll(self) -> Policy | None:
        now = digest(self.path)
        if now is None or now == self._seen:
            return None
        self._seen = now
        try:
            loaded = load_policy(self.path, self.catalogs)
        except InvalidInput as exc:
            self.refused += 1
            self.on_invalid(exc)
            return None
        self.reloads += 1
        return loaded.policy
