/* version.h - the release and git commit this build is, one answer for
 * `kiln --version`, `kilnd --version` and the API (Kiln-Version header,
 * GET /version). cmake/version.cmake writes them at every build: the
 * release from VERSION, the commit from git (or VERSION's second line in a
 * `git archive` tarball). docs/release.md says how a release is made. */
#ifndef KILN_UTIL_VERSION_H
#define KILN_UTIL_VERSION_H

/* "0.1.0": VERSION's first line. */
const char *kiln__version_release(void);
/* the full commit id, "-dirty" appended when tracked files differed from
 * it at build time; "unknown" when neither git nor VERSION knew it */
const char *kiln__version_commit(void);
/* "0.1.0 (commit <id>)": what every --version prints after the program's
 * name and the API's Kiln-Version header carries. Static storage. */
const char *kiln__version_string(void);

#endif
