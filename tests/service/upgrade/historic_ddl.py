#!/usr/bin/env python3
"""historic_ddl.py SRC VERSION: the store's DDL as the kilnd of that schema
version ran it, read from git history (the C string literals themselves):
  0  kilnd before versions were kept: 0d955fd^:src/store/store.c `schema[]`
  2  the last kilnd writing version 2: b903cb8^:src/store/schema.c, migrations 0 and 1
Prints the SQL. it_upgrade.sh compares the schema it makes with the
fixture's (tests/service/upgrade/v*.sql) so a fixture cannot drift from it."""
import re
import subprocess
import sys

src, version = sys.argv[1], int(sys.argv[2])


def show(rev_path):
    return subprocess.run(["git", "-C", src, "show", rev_path], check=True,
                          capture_output=True, text=True).stdout


def literals(c):
    # the adjacent "..." pieces of one C initializer, joined
    return "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', c))


if version == 0:
    text = show("0d955fd^:src/store/store.c")
    body = text[text.index("static const char schema[] ="):]
    print(literals(body[:body.index(";\n")]))
elif version == 2:
    text = show("b903cb8^:src/store/schema.c")
    body = text[text.index("migrations[KILN__STORE_SCHEMA] = {"):]
    body = body[:body.index("};")]
    # entries are separated by "," after a closing quote at a line end
    entries = re.split(r'",\s*\n', body)
    print(literals(entries[0] + '"') + literals(entries[1] + '"'))
else:
    sys.exit("historic_ddl.py: versions 0 and 2 are the earlier ones kilnd wrote")
