"""cmake/write_git_revision.cmake, the build step that records which commit a binary was built
from: in a scratch git repository it writes the commit, adds "+dirty" while a tracked file
differs from it, follows a new commit, leaves its output untouched when nothing changed (so that
nothing recompiles), and writes "unknown" outside a checkout. Argument: the cmake binary."""
import os
import re
import subprocess
import sys
import tempfile

from harness_test_lib import SOURCE_DIR

CMAKE = sys.argv[1]
SCRIPT = os.path.join(SOURCE_DIR, "cmake/write_git_revision.cmake")


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def written(source_dir, out):
    subprocess.run([CMAKE, f"-DSOURCE_DIR={source_dir}", f"-DOUT={out}", "-P", SCRIPT], check=True)
    (revision,) = re.findall(r'return "([^"]*)";', open(out).read())
    return revision


with tempfile.TemporaryDirectory() as tmp:
    repo, out = os.path.join(tmp, "repo"), os.path.join(tmp, "git_revision.cpp")
    os.mkdir(repo)
    git(repo, "init", "-q")
    open(os.path.join(repo, "a.txt"), "w").write("one\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "one")
    first = git(repo, "rev-parse", "--short=12", "HEAD")
    assert written(repo, out) == first, open(out).read()
    assert '#include "ranks/git_revision.h"' in open(out).read()
    stamp = os.stat(out).st_mtime_ns
    assert written(repo, out) == first and os.stat(out).st_mtime_ns == stamp, "rewritten unchanged"
    open(os.path.join(repo, "untracked.txt"), "w").write("not in git\n")
    assert written(repo, out) == first, "an untracked file is not a change to the commit"
    open(os.path.join(repo, "a.txt"), "w").write("two\n")
    assert written(repo, out) == first + "+dirty"
    git(repo, "commit", "-q", "-am", "two")
    second = git(repo, "rev-parse", "--short=12", "HEAD")
    assert second != first and written(repo, out) == second
    outside = os.path.join(tmp, "not-a-checkout")
    os.mkdir(outside)
    assert written(outside, out) == "unknown"
print("git revision: ok")
