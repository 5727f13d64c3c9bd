/* test_hex.c - util/hex: lowercase hex out, and back (kilnd's tokens file
 * reads the hashes `kiln tokens new` wrote); anything but lowercase hex
 * digits is refused. */
#include <string.h>

#include "test.h"
#include "util/hex.h"

int main(void)
{
    const unsigned char in[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xff};
    char text[2 * sizeof in + 1];
    const char *out = text;
    kiln_hex(in, sizeof in, text);
    CHECK_STR(out, "00017f80abff");
    kiln_hex(in, 0, text);
    CHECK_STR(out, "");

    unsigned char back[sizeof in];
    CHECK(kiln_unhex("00017f80abff", sizeof back, back) && memcmp(back, in, sizeof in) == 0);
    CHECK(!kiln_unhex("00017F80abff", sizeof back, back)); /* upper case */
    CHECK(!kiln_unhex("00017g80abff", sizeof back, back));
    CHECK(!kiln_unhex("0001 f80abff", sizeof back, back));
    TEST_DONE();
}
