"""A full disk or quota, wherever it is raised: the one rule that recognises it."""

import errno
import os
import re

DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
"""The errnos of a full disk or an exhausted quota."""

# tensorstore (under orbax) reports a full disk as a ValueError naming the code.
_TEXT = re.compile(
    r"No space left on device|Disk quota exceeded|os_error_code='?(28|122)\b"
)


def disk_full(err: BaseException) -> OSError | None:
    """The full disk or quota that `err` is or was raised from (its cause or
    context, as a traceback shows the chain), as an `OSError`; None if none.
    Of several, the first that names a file (a library's own error without a
    path does not replace one with it)."""
    seen: set[int] = set()
    found = None
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in DISK_FULL:
            if found is None or (found.filename is None and current.filename):
                found = current
        elif found is None and (match := _TEXT.search(str(current))):
            quota = "quota" in match.group(0) or match.group(1) == "122"
            code = errno.EDQUOT if quota else errno.ENOSPC
            found = OSError(code, os.strerror(code))
        suppressed = current.__suppress_context__
        current = current.__cause__ or (None if suppressed else current.__context__)
    return found


__all__ = ["DISK_FULL", "disk_full"]
