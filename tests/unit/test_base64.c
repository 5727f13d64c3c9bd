/* test_base64.c - util/base64: RFC 4648's vectors in both alphabets, with
 * and without padding; every length round-trips; what a decoder must refuse
 * (page tokens arrive from clients). */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "util/base64.h"

static void enc(const char *in, int flags, const char *want)
{
    char buf[64];
    const char *out = buf;
    size_t n = kiln_b64_encode(in, strlen(in), flags, buf);
    CHECK_STR(out, want);
    CHECK(n == strlen(want) && n == kiln_b64_len(strlen(in), flags));
}

static bool dec(const char *in, int flags, const char *want)
{
    unsigned char out[64];
    size_t n = 0;
    if (!kiln_b64_decode(in, strlen(in), flags, out, sizeof out, &n)) return false;
    return n == strlen(want) && memcmp(out, want, n) == 0;
}

int main(void)
{
    /* RFC 4648 section 10 */
    static const char *const v[][3] = {{"", "", ""},
                                       {"f", "Zg==", "Zg"},
                                       {"fo", "Zm8=", "Zm8"},
                                       {"foo", "Zm9v", "Zm9v"},
                                       {"foob", "Zm9vYg==", "Zm9vYg"},
                                       {"fooba", "Zm9vYmE=", "Zm9vYmE"},
                                       {"foobar", "Zm9vYmFy", "Zm9vYmFy"}};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        enc(v[i][0], 0, v[i][1]);
        enc(v[i][0], KILN_B64_URL | KILN_B64_NOPAD, v[i][2]);
        CHECK(dec(v[i][1], 0, v[i][0]));
        CHECK(dec(v[i][2], KILN_B64_URL | KILN_B64_NOPAD, v[i][0]));
    }
    /* the two alphabets differ in 62 and 63 only */
    enc("\xfb\xff\xbf", 0, "+/+/");
    enc("\xfb\xff\xbf", KILN_B64_URL, "-_-_");
    CHECK(dec("-_-_", KILN_B64_URL, "\xfb\xff\xbf"));
    CHECK(!dec("-_-_", 0, "\xfb\xff\xbf"));
    CHECK(!dec("+/+/", KILN_B64_URL, "\xfb\xff\xbf"));

    /* every length from 0 to 200, random bytes, all four forms */
    unsigned char in[200], back[200];
    char text[300];
    srand(7);
    bool all = true;
    for (size_t n = 0; n <= sizeof in; n++)
        for (int f = 0; f < 4; f++) {
            for (size_t k = 0; k < n; k++)
                in[k] = (unsigned char)rand();
            size_t tl = kiln_b64_encode(in, n, f, text), got = 0;
            all &= tl == kiln_b64_len(n, f) && strlen(text) == tl;
            all &= kiln_b64_decode(text, tl, f, back, sizeof back, &got) && got == n &&
                   memcmp(in, back, n) == 0;
        }
    CHECK_MSG(all, "every length round-trips in every form");

    /* refused: a foreign character, a lone 6-bit tail, padding where none is
     * wanted or in the wrong place, too little room */
    CHECK(!dec("Zm9v!A==", 0, "foo"));
    CHECK(!dec("Zm9vY", KILN_B64_NOPAD, "foo"));
    CHECK(!dec("Zg==", KILN_B64_NOPAD, "f"));
    CHECK(!dec("Zg=", 0, "f"));
    CHECK(!dec("Z===", 0, ""));
    CHECK(!dec("=Zg=", 0, "f"));
    unsigned char small[2];
    size_t got = 0;
    CHECK(!kiln_b64_decode("Zm9v", 4, 0, small, sizeof small, &got));
    TEST_DONE();
}
