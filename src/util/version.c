/* version.c - the build's release and commit (version.h). The only file
 * that includes the generated header, so a new commit recompiles it alone. */
#include "util/version.h"

#include "kiln_version.h" /* BUILD/gen, written by cmake/version.cmake */

const char *kiln__version_release(void)
{
    return KILN_RELEASE;
}

const char *kiln__version_commit(void)
{
    return KILN_COMMIT;
}

const char *kiln__version_string(void)
{
    return KILN_RELEASE " (commit " KILN_COMMIT ")";
}
