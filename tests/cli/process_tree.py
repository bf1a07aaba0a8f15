"""Processes below a process, from /proc (Linux): for the signal tests, which check that no child
of an interrupted command is left running (tests/cli/signals.py, tests/python/test_round5.py)."""
import os


def descendants(pid):
    """Every process below `pid`, from /proc's children lists."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = [int(c) for t in os.listdir("/proc/%d/task" % p)
                    for c in open("/proc/%d/task/%s/children" % (p, t)).read().split()]
        except OSError:
            continue
        out += kids
        todo += kids
    return out


def alive(pid):
    """Whether `pid` exists and is not a zombie."""
    try:
        return open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
