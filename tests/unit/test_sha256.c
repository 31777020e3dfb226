/* test_sha256.c - SHA-256 and HMAC-SHA-256 (core/sha256.h): the FIPS 180-4
 * example messages, RFC 4231 test cases 1-4, 6 and 7, incremental updates
 * split anywhere, and the constant-time comparison. */
#include <string.h>

#include "check.h"
#include "core/sha256.h"

/* Whether OUT is the digest written in hex as HEX. */
static int is_hex(const uint8_t out[VS_SHA256_LEN], const char *hex)
{
    char s[2 * VS_SHA256_LEN + 1];
    for (int i = 0; i < VS_SHA256_LEN; i++)
        snprintf(s + 2 * i, 3, "%02x", out[i]);
    if (strcmp(s, hex) != 0) {
        fprintf(stderr, "  got  %s\n  want %s\n", s, hex);
        return 0;
    }
    return 1;
}

static void check_sha(const void *msg, size_t len, const char *hex)
{
    uint8_t out[VS_SHA256_LEN];
    vs_sha256(msg, len, out);
    CHECK(is_hex(out, hex));
}

static void test_fips(void)
{
    check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    CHECK_EQ(strlen(m448) * 8, 448);
    check_sha(m448, strlen(m448),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                       "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    CHECK_EQ(strlen(m896) * 8, 896);
    check_sha(m896, strlen(m896),
              "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");

    /* One million 'a': once in one call, once fed 1000 bytes at a time. */
    static char a[1000000];
    memset(a, 'a', sizeof(a));
    const char *million = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
    check_sha(a, sizeof(a), million);
    struct vs_sha256 h;
    uint8_t out[VS_SHA256_LEN];
    vs_sha256_init(&h);
    for (int i = 0; i < 1000; i++)
        vs_sha256_update(&h, a, 1000);
    vs_sha256_final(&h, out);
    CHECK(is_hex(out, million));
}

static void check_hmac(const void *key, size_t keylen, const void *msg, size_t len, const char *hex)
{
    struct vs_hmac m;
    uint8_t out[VS_SHA256_LEN];
    vs_hmac_init(&m, key, keylen);
    vs_hmac_update(&m, msg, len);
    vs_hmac_final(&m, out);
    CHECK(is_hex(out, hex));

    /* Final wipes the key material. */
    static const struct vs_hmac zero;
    CHECK(memcmp(&m, &zero, sizeof(m)) == 0);

    /* A byte at a time gives the same MAC. */
    const uint8_t *p = msg;
    vs_hmac_init(&m, key, keylen);
    for (size_t i = 0; i < len; i++)
        vs_hmac_update(&m, p + i, 1);
    vs_hmac_final(&m, out);
    CHECK(is_hex(out, hex));
}

static void test_rfc4231(void)
{
    uint8_t key[131], data[50];

    /* Test case 1. */
    memset(key, 0x0b, 20);
    check_hmac(key, 20, "Hi There", 8,
               "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");

    /* Test case 2: a key shorter than the output. */
    const char *msg2 = "what do ya want for nothing?";
    check_hmac("Jefe", 4, msg2, strlen(msg2),
               "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");

    /* Test case 3: 50 bytes of 0xdd. */
    memset(key, 0xaa, 20);
    memset(data, 0xdd, sizeof(data));
    check_hmac(key, 20, data, sizeof(data),
               "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");

    /* Test case 4: key 0x01..0x19, 50 bytes of 0xcd. */
    for (int i = 0; i < 25; i++)
        key[i] = (uint8_t)(i + 1);
    memset(data, 0xcd, sizeof(data));
    check_hmac(key, 25, data, sizeof(data),
               "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");

    /* Test cases 6 and 7: a 131-byte key, longer than a block, hashed first. */
    memset(key, 0xaa, sizeof(key));
    const char *msg6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    check_hmac(key, sizeof(key), msg6, strlen(msg6),
               "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    const char *msg7 = "This is a test using a larger than block-size key and a larger "
                       "than block-size data. The key needs to be hashed before being "
                       "used by the HMAC algorithm.";
    check_hmac(key, sizeof(key), msg7, strlen(msg7),
               "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

/* A 200-byte message fed in two parts split at every offset, and in three
 * parts split at every pair of offsets, hashes as in one call. */
static void test_incremental(void)
{
    uint8_t msg[200], want[VS_SHA256_LEN], out[VS_SHA256_LEN];
    for (size_t i = 0; i < sizeof(msg); i++)
        msg[i] = (uint8_t)(i * 7 + 3);
    vs_sha256(msg, sizeof(msg), want);

    int two_bad = 0, three_bad = 0;
    for (size_t i = 0; i <= sizeof(msg); i++) {
        struct vs_sha256 h;
        vs_sha256_init(&h);
        vs_sha256_update(&h, msg, i);
        vs_sha256_update(&h, msg + i, sizeof(msg) - i);
        vs_sha256_final(&h, out);
        two_bad += memcmp(out, want, sizeof(out)) != 0;

        for (size_t j = i; j <= sizeof(msg); j++) {
            vs_sha256_init(&h);
            vs_sha256_update(&h, msg, i);
            vs_sha256_update(&h, msg + i, j - i);
            vs_sha256_update(&h, msg + j, sizeof(msg) - j);
            vs_sha256_final(&h, out);
            three_bad += memcmp(out, want, sizeof(out)) != 0;
        }
    }
    CHECK_EQ(two_bad, 0);
    CHECK_EQ(three_bad, 0);

    /* The same for HMAC, split at every offset. */
    static const char key[] = "a key of some length";
    struct vs_hmac m;
    vs_hmac_init(&m, key, sizeof(key) - 1);
    vs_hmac_update(&m, msg, sizeof(msg));
    vs_hmac_final(&m, want);
    int hmac_bad = 0;
    for (size_t i = 0; i <= sizeof(msg); i++) {
        vs_hmac_init(&m, key, sizeof(key) - 1);
        vs_hmac_update(&m, msg, i);
        vs_hmac_update(&m, msg + i, sizeof(msg) - i);
        vs_hmac_final(&m, out);
        hmac_bad += memcmp(out, want, sizeof(out)) != 0;
    }
    CHECK_EQ(hmac_bad, 0);

    /* Every length 0..200 hashes as in one call fed a byte at a time. */
    int len_bad = 0;
    for (size_t n = 0; n <= sizeof(msg); n++) {
        struct vs_sha256 h;
        vs_sha256(msg, n, want);
        vs_sha256_init(&h);
        for (size_t i = 0; i < n; i++)
            vs_sha256_update(&h, msg + i, 1);
        vs_sha256_final(&h, out);
        len_bad += memcmp(out, want, sizeof(out)) != 0;
    }
    CHECK_EQ(len_bad, 0);
}

static void test_equal_ct(void)
{
    uint8_t a[32], b[32];
    for (int i = 0; i < 32; i++)
        a[i] = b[i] = (uint8_t)(0xa5 ^ i);
    CHECK(vs_equal_ct(a, b, sizeof(a)));
    CHECK(vs_equal_ct(a, b, 0));
    CHECK(vs_equal_ct("x", "y", 0));
    for (int i = 0; i < 32; i++) {
        for (int bit = 0; bit < 8; bit++) {
            b[i] ^= (uint8_t)(1u << bit);
            CHECK(!vs_equal_ct(a, b, sizeof(a)));
            CHECK(vs_equal_ct(a, b, (size_t)i)); /* the prefix before it */
            b[i] ^= (uint8_t)(1u << bit);
        }
    }
    CHECK(vs_equal_ct(a, b, sizeof(a)));
}

int main(void)
{
    test_fips();
    test_rfc4231();
    test_incremental();
    test_equal_ct();
    return check_finish("test_sha256");
}
