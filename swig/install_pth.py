"""Writes loom.pth into this interpreter's site-packages so that `import loom` finds the module
built in a build tree:  python3 swig/install_pth.py <build>/python

A .pth file holds one directory per line; site.py appends it to sys.path at start-up. Running
it again with another build tree points the interpreter there instead (one loom per Python).
"""
import os
import site
import sys


def main(argv):
    if len(argv) != 2:
        print("usage: install_pth.py <build>/python", file=sys.stderr)
        return 2
    target = os.path.abspath(argv[1])
    if not os.path.isfile(os.path.join(target, "loom", "__init__.py")):
        print(f"install_pth: {target}/loom/__init__.py not found: build the loom_python target first",
              file=sys.stderr)
        return 1
    site_dir = site.getsitepackages()[0]
    pth = os.path.join(site_dir, "loom.pth")
    line = target + "\n"
    try:
        with open(pth) as f:
            if f.read() == line:
                print(f"install_pth: {pth} already points at {target}")
                return 0
    except OSError:
        pass
    try:
        os.makedirs(site_dir, exist_ok=True)
        with open(pth, "w") as f:
            f.write(line)
    except OSError as e:
        print(f"install_pth: cannot write {pth}: {e} (run as root)", file=sys.stderr)
        return 1
    print(f"install_pth: {pth} -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
