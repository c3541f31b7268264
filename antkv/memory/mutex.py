"""A mutex whose uncontended acquire and release are one cheap C call each.

``threading.Lock.acquire`` parses its optional arguments (``blocking``, ``timeout``) on every
call, which is a good part of what a block cache insert costs on top of its dict operations.
:class:`TokenMutex` holds one token in a ``collections.deque`` of at most one item: the thread
that pops the token holds the mutex; releasing appends it back.  ``deque.pop`` and
``deque.append`` each take no argument parsing and are atomic (one C call under the GIL, a
per-object lock on a free-threaded build), so of two threads popping at once exactly one gets
the token.  The deque's ``maxlen`` of 1 keeps a second release from ever making two tokens.

A thread that finds the token taken polls for it, sleeping between tries (``sleep(0)`` first,
then from 1 µs doubling up to 1 ms; a sleep releases the GIL, so the holder can run).  That is cheap only
because holders keep the mutex for a few in-memory steps and never across I/O or a wait:
REQUIRES of every user.  Not reentrant, not fair.

Hot paths inline the uncontended case on :attr:`TokenMutex.tokens`::

    tokens = mutex.tokens
    try:
        tokens.pop()
    except IndexError:
        mutex.wait()
    try:
        ...
    finally:
        tokens.append(None)

Other code uses :meth:`acquire` / :meth:`release` or ``with mutex:``.
"""

from __future__ import annotations

from collections import deque
from time import sleep

_MAX_BACKOFF = 0.001  # seconds between polls of a held mutex, at most


class TokenMutex:
    """A mutual-exclusion lock over one token; see the module docstring."""

    __slots__ = ("tokens",)

    def __init__(self) -> None:
        self.tokens: deque = deque((None,), maxlen=1)  # the token while the mutex is free

    def acquire(self) -> None:
        try:
            self.tokens.pop()
        except IndexError:
            self.wait()

    def wait(self) -> None:
        """Take the token once its holder gives it back (the contended :meth:`acquire`)."""
        pop = self.tokens.pop
        delay = 0.0
        while True:
            sleep(delay)
            try:
                pop()
                return
            except IndexError:
                delay = min(delay * 2 or 1e-6, _MAX_BACKOFF)

    def release(self) -> None:
        self.tokens.append(None)

    def locked(self) -> bool:
        return not self.tokens

    def __enter__(self) -> "TokenMutex":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.tokens.append(None)
