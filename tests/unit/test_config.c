/* test_config.c - VSOCKET_* parsing: valid values apply, bad ones are
 * reported and leave the defaults. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "config/config.h"
#include "config/log.h"
#include "transport/transport.h"

static void test_transports(void)
{
    char err[256];
    unsigned mask = 0;
    CHECK_EQ(vs_config_parse_transports("kernel", &mask, err, sizeof(err)), 0);
    CHECK_EQ(mask, VS_TRANSPORT_BIT(VS_TRANSPORT_KERNEL));

    CHECK_EQ(vs_config_parse_transports("bogus", &mask, err, sizeof(err)), -1);
    CHECK(strstr(err, "unknown transport 'bogus'") != NULL);
    CHECK(strstr(err, "accepted values") != NULL);

    CHECK_EQ(vs_config_parse_transports("", &mask, err, sizeof(err)), -1);
    CHECK_EQ(vs_config_parse_transports("kernel,", &mask, err, sizeof(err)), -1);
    CHECK(strstr(err, "trailing comma") != NULL);
    CHECK_EQ(vs_config_parse_transports(",kernel", &mask, err, sizeof(err)), -1);

    /* Named but not built yet: a distinct message. */
    if (!vs_transport_built(VS_TRANSPORT_SHM)) {
        CHECK_EQ(vs_config_parse_transports("shm,kernel", &mask, err, sizeof(err)), -1);
        CHECK(strstr(err, "not available in this build") != NULL);
    }
}

static void test_load_valid(void)
{
    setenv("VSOCKET_TRANSPORTS", "kernel", 1);
    setenv("VSOCKET_LOG_LEVEL", "none", 1);
    setenv("VSOCKET_STATS", "off", 1);
    setenv("VSOCKET_STATS_MAX", "100", 1);
    setenv("VSOCKET_STATS_DIR", "/tmp", 1);
    setenv("VSOCKET_FOLLOW_EXEC", "no", 1);
    setenv("VSOCKET_FD_FLOOR", "0", 1);
    setenv("VSOCKET_RDMA_SPILL_MS", "5000", 1);
    struct vs_config c;
    vs_config_defaults(&c);
    CHECK(c.udp); /* on by default */
    setenv("VSOCKET_UDP", "off", 1);
    vs_config_load(&c);
    CHECK(!c.udp);
    CHECK_EQ(c.fd_floor, 0);
    CHECK_EQ(c.rdma_spill_ms, 5000);
    CHECK(c.transports_set);
    CHECK_EQ(c.log_level, VS_LOG_NONE);
    CHECK(!c.stats);
    CHECK_EQ(c.stats_max, 100);
    CHECK(strcmp(c.stats_dir, "/tmp") == 0);
    CHECK(!c.follow_exec);
}

static void test_load_invalid(void)
{
    /* Messages go to stderr; the checks are that defaults survive. */
    setenv("VSOCKET_TRANSPORTS", "rdma,,kernel", 1);
    setenv("VSOCKET_LOG_LEVEL", "loud", 1);
    setenv("VSOCKET_STATS", "maybe", 1);
    setenv("VSOCKET_STATS_MAX", "12abc", 1);
    setenv("VSOCKET_FOLLOW_EXEC", "", 1);
    setenv("VSOCKET_FD_FLOOR", "-1", 1);
    setenv("VSOCKET_RDMA_SPILL_MS", "0", 1);
    setenv("VSOCKET_UDP", "sometimes", 1);
    struct vs_config c, d;
    vs_config_load(&c);
    vs_config_defaults(&d);
    CHECK_EQ(c.fd_floor, -1); /* automatic */
    CHECK_EQ(c.transports, d.transports);
    CHECK(!c.transports_set);
    CHECK_EQ(c.log_level, d.log_level);
    CHECK_EQ(c.stats, d.stats);
    CHECK_EQ(c.stats_max, d.stats_max);
    CHECK_EQ(c.follow_exec, d.follow_exec);
    CHECK_EQ(c.rdma_spill_ms, VS_RDMA_SPILL_MS_DEFAULT);
    CHECK(c.udp);

    const char *out_of_range[] = {"0", "15", "1048577", "-5", "99999999999999999999", ""};
    for (size_t i = 0; i < sizeof(out_of_range) / sizeof(*out_of_range); i++) {
        setenv("VSOCKET_STATS_MAX", out_of_range[i], 1);
        vs_config_load(&c);
        CHECK_EQ(c.stats_max, VS_STATS_MAX_DEFAULT);
    }
    setenv("VSOCKET_LOG_FILE", "/nonexistent-dir/log", 1);
    vs_config_load(&c);
    CHECK_EQ(c.log_file[0], '\0');
}

static void test_format(void)
{
    char out[64];
    vs_config_format_transports(VS_TRANSPORT_BIT(VS_TRANSPORT_KERNEL) |
                                    VS_TRANSPORT_BIT(VS_TRANSPORT_RDMA),
                                out, sizeof(out));
    CHECK(strcmp(out, "kernel,rdma") == 0);
    CHECK_EQ(vs_log_level_by_name("trace"), VS_LOG_TRACE);
    CHECK_EQ(vs_log_level_by_name("TRACE"), -1);
}

int main(void)
{
    test_transports();
    test_load_valid();
    test_load_invalid();
    test_format();
    return check_finish("test_config");
}
