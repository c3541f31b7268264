"""TokenMutex: mutual exclusion with one-C-call acquire and release (antkv.memory.mutex)."""

import threading
import time

from antkv.memory.mutex import TokenMutex


def test_holders_exclude_each_other_across_thread_switches():
    m = TokenMutex()
    state = {"n": 0, "inside": 0, "most_inside": 0}

    def work():
        for _ in range(100):
            with m:
                state["inside"] += 1
                state["most_inside"] = max(state["most_inside"], state["inside"])
                n = state["n"]
                time.sleep(0.0001)  # let the others run in the middle of the update
                state["n"] = n + 1
                state["inside"] -= 1

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert state == {"n": 400, "inside": 0, "most_inside": 1}


def test_a_waiter_gets_the_mutex_when_the_holder_releases_it():
    m = TokenMutex()
    m.acquire()
    assert m.locked()
    got = threading.Event()

    def waiter():
        m.acquire()
        got.set()
        m.release()

    t = threading.Thread(target=waiter)
    t.start()
    assert not got.wait(0.05)  # held: the waiter polls
    m.release()
    assert got.wait(5)
    t.join()
    assert not m.locked()


def test_a_second_release_never_makes_two_tokens():
    m = TokenMutex()
    m.release()  # a release of a free mutex keeps one token
    m.acquire()
    assert m.locked()
    m.release()
    assert not m.locked()
