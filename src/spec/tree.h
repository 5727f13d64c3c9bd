/* tree.h - YAML <-> jansson trees, the common form every spec parser works on.
 *
 * YAML scalars carry no reliable type (is `2.1` a version or a number?), so the
 * loader keeps every scalar as a JSON string and lets the schema decide how to
 * read it; plain `null`, `~` and empty scalars become JSON null. Aliases are
 * refused (they let a few bytes expand into gigabytes), as are documents past
 * KILN_SPEC_MAX_BYTES or nested deeper than KILN_SPEC_MAX_DEPTH. */
#ifndef KILN_SPEC_TREE_H
#define KILN_SPEC_TREE_H

#include <jansson.h>
#include <stddef.h>

#include "kiln/diag.h"

/* Parses one YAML document. Returns a new reference, or NULL with a violation
 * in `d` (field "", "line L, column C: ..."). An empty document gives an empty
 * object. *err (optional) says why: KILN_EINVAL, KILN_ELIMIT or KILN_ENOMEM. */
json_t *kiln__yaml_load(const char *buf, size_t len, kiln_diag *d);
json_t *kiln__yaml_load_err(const char *buf, size_t len, kiln_diag *d, kiln_err *err);

/* Parses every document of a YAML stream (at most KILN_SPEC_MAX_DOCS): a new
 * array of their trees, empty documents left out. Same caps and errors. */
#define KILN_SPEC_MAX_DOCS 64
json_t *kiln__yaml_load_all(const char *buf, size_t len, kiln_diag *d, kiln_err *errp);

/* Parses JSON with the same size cap and error style, except that a syntax
 * error's violation names the field where it stands ("trainingInput.args[2]",
 * "" at the top level). NUL (\u0000) is let into string values, for the
 * decoder to refuse at its field; in keys it is a syntax error. */
json_t *kiln__json_load(const char *buf, size_t len, kiln_diag *d, kiln_err *err);

/* Emits a tree as a YAML document (block style, keys in insertion order).
 * Strings that another YAML reader would take for a number, bool or null are
 * quoted. Caller frees; NULL on ENOMEM. */
char *kiln__yaml_dump(const json_t *root);

/* Reads a whole file with a size cap. Caller frees *buf. KILN_EIO (errno kept)
 * or KILN_ELIMIT. */
kiln_err kiln__read_file(const char *path, size_t cap, char **buf, size_t *len);

#endif
