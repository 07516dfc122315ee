"""As root, the embedded cluster's system user is created once, whoever starts first.

The wheel creates it with ``useradd`` when it is missing. On a fresh machine two processes
starting clusters at once (pytest's workers did) both ran it and both succeeded: the second
gave the user a new uid after the first had chowned its data directory to the old one, and
that initdb failed with "could not change permissions". Here several processes ensure a
throwaway user at the same moment; each must see the uid the user keeps.
"""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    os.name != "posix" or os.geteuid() != 0, reason="creating a system user needs root"
)

ENSURE = """
import os, pwd, sys, time
from pathlib import Path
from brain.server.runtime import embedded

user, go = sys.argv[1], Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
embedded._system_user_once(user)
print(pwd.getpwnam(user).pw_uid)
"""


def test_processes_starting_at_once_agree_on_the_system_users_uid(tmp_path: Path) -> None:
    user = f"brain_t{uuid.uuid4().hex[:8]}"
    go = tmp_path / "go"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", ENSURE, user, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        time.sleep(1.0)  # every process imported and is waiting for the start
        go.touch()
        results = [p.communicate(timeout=60) for p in processes]
        assert [p.returncode for p in processes] == [0] * 4, [err for _, err in results]
        seen = {int(out) for out, _ in results}
        kept = pwd.getpwnam(user).pw_uid
        assert seen == {kept}
        # A second call finds the user and changes nothing.
        subprocess.run([sys.executable, "-c", ENSURE, user, str(go)], check=True)
        assert pwd.getpwnam(user).pw_uid == kept
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
        subprocess.run(["userdel", user], capture_output=True)
