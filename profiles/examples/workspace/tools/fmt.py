"""A tiny formatter for the sluice demo: in every .py file beneath the
directories given, tabs become four spaces, trailing whitespace goes and
the file ends with one newline. With --drop-logs it also deletes *.log and
*_log.txt files (a "tidy" whose deletions an approver must see).

It writes in place, as formatters do; inside sluice its writes land in the
command's scratch layer and reach the workspace only as a changeset that
passes the same policy as a file write."""
import os
import sys


def fmt(text):
    lines = [l.replace("\t", "    ").rstrip() for l in text.split("\n")]
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def main(args):
    drop = "--drop-logs" in args
    dirs = [a for a in args if not a.startswith("--")] or ["."]
    for top in dirs:
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in sorted(filenames):
                p = os.path.join(dirpath, name)
                if drop and (name.endswith(".log") or name.endswith("_log.txt")):
                    os.remove(p)
                    print("deleted", p)
                    continue
                if not name.endswith(".py") or os.path.islink(p):
                    continue
                with open(p) as f:
                    old = f.read()
                new = fmt(old)
                if new != old:
                    with open(p, "w") as f:
                        f.write(new)
                    print("formatted", p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
