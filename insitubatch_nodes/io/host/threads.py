"""How the library's threads are named and how long stopping one may take.

Every thread the library starts (the fetch loop, its decode pool, the device copier, the
cache's writer) is named with one prefix, so that a thread dump, `py-spy` or a test can
tell ours from the user's; and every stop waits a bounded time, so that a read stuck in
the kernel is reported instead of hanging the process.
"""

THREAD_PREFIX = "insitubatch"
STOP_TIMEOUT_S = 10.0
