"""The README's examples of reading a bundle from code, as files: `readme_examples.py DIR` writes
example.c, example.cpp and example.py from the fenced blocks under "Reading a bundle from code"."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
text = open(os.path.join(ROOT, "README.md")).read()
section = text[text.index("## Reading a bundle from code"):]
section = section[:section.index("\n## ", 5)]
blocks = dict(re.findall(r"```(c|cpp|python)\n(.*?)```", section, re.S))
assert set(blocks) == {"c", "cpp", "python"}, blocks.keys()
for language, suffix in (("c", "c"), ("cpp", "cpp"), ("python", "py")):
    with open(os.path.join(sys.argv[1], f"example.{suffix}"), "w") as f:
        f.write(blocks[language])
