/* vsocket-sweep: command line. */
#include "sweep.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 64

static void usage_exit(const char *msg, const char *arg)
{
    if (msg)
        fprintf(stderr, "vsocket-sweep: %s%s\n", msg, arg ? arg : "");
    fprintf(stderr,
            "usage: vsocket-sweep server --port P [--bind ADDR] [--udp] [--once]\n"
            "       vsocket-sweep client --host H --port P --mode pingpong|stream [--udp]\n"
            "                     [--sizes 2,64,...] [--iters N] [--seconds S] [--warmup N]\n"
            "                     [--stream-warmup N] [--json]\n"
            "see tools/sweep/README.md\n");
    exit(EXIT_USAGE);
}

static uint64_t parse_num(const char *s, const char *what)
{
    uint64_t v;
    if (tool_parse_size(s, &v) < 0)
        usage_exit("bad number for ", what);
    return v;
}

static int parse_sizes(const char *s, size_t *out)
{
    int n = 0;
    char *copy = strdup(s), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (n == MAX_SIZES)
            usage_exit("too many --sizes", NULL);
        uint64_t v = parse_num(t, "--sizes");
        if (v < 1 || v > (1ULL << 30))
            usage_exit("sizes must be 1..1G: ", t);
        out[n++] = (size_t)v;
    }
    free(copy);
    if (n == 0)
        usage_exit("empty --sizes", NULL);
    return n;
}

/* Default sweep: 2 B .. 1 MiB in powers of two. */
static int default_sizes(size_t *out)
{
    int n = 0;
    for (size_t s = 2; s <= (1u << 20); s *= 2)
        out[n++] = s;
    return n;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"host", 1, 0, 'h'},    {"port", 1, 0, 'p'},   {"bind", 1, 0, 'b'},  {"udp", 0, 0, 'u'},
        {"once", 0, 0, 'o'},    {"mode", 1, 0, 'm'},   {"sizes", 1, 0, 's'}, {"iters", 1, 0, 'i'},
        {"seconds", 1, 0, 'S'}, {"warmup", 1, 0, 'w'}, {"json", 0, 0, 'j'},
        {"stream-warmup", 1, 0, 'W'}, {0, 0, 0, 0}};
    static size_t sizes[MAX_SIZES];
    if (argc < 2 || (strcmp(argv[1], "server") && strcmp(argv[1], "client")))
        usage_exit("first argument must be 'server' or 'client'", NULL);
    bool server = !strcmp(argv[1], "server");
    struct server_opts so = {.bind_addr = "0.0.0.0"};
    struct client_opts co = {.seconds = 1.0, .warmup = 100, .sizes = sizes};
    const char *mode = NULL;
    optind = 2;
    int opt;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'h':
            co.host = optarg;
            break;
        case 'p':
            so.port = co.port = (uint16_t)parse_num(optarg, "--port");
            break;
        case 'b':
            so.bind_addr = optarg;
            break;
        case 'u':
            so.udp = co.udp = true;
            break;
        case 'o':
            so.once = true;
            break;
        case 'm':
            mode = optarg;
            break;
        case 's':
            co.nsizes = parse_sizes(optarg, sizes);
            break;
        case 'i':
            co.iters = parse_num(optarg, "--iters");
            break;
        case 'S':
            co.seconds = strtod(optarg, NULL);
            break;
        case 'w':
            co.warmup = parse_num(optarg, "--warmup");
            break;
        case 'W':
            co.stream_warmup = parse_num(optarg, "--stream-warmup");
            if (co.stream_warmup > MAX_STREAM_WARMUP)
                usage_exit("--stream-warmup too large", NULL);
            break;
        case 'j':
            co.json = true;
            break;
        default:
            usage_exit(NULL, NULL);
        }
    }
    if (optind < argc)
        usage_exit("unexpected argument ", argv[optind]);
    if (!so.port)
        usage_exit("--port is required", NULL);
    signal(SIGPIPE, SIG_IGN);
    if (server)
        return server_main(&so);

    if (!co.host)
        usage_exit("client needs --host", NULL);
    if (!mode || (strcmp(mode, "pingpong") && strcmp(mode, "stream")))
        usage_exit("client needs --mode pingpong|stream", NULL);
    co.test = !strcmp(mode, "pingpong") ? TEST_PINGPONG : TEST_STREAM;
    if (co.test == TEST_STREAM && co.udp)
        usage_exit("UDP supports --mode pingpong only", NULL);
    if (!(co.seconds > 0))
        usage_exit("--seconds must be positive", NULL);
    if (co.nsizes == 0)
        co.nsizes = default_sizes(sizes);
    if (co.udp) {
        /* Sizes above the UDP limit are dropped from the sweep (the default list ends at 1 MiB). */
        int k = 0;
        for (int i = 0; i < co.nsizes; i++)
            if (sizes[i] <= UDP_MAX_PAYLOAD)
                sizes[k++] = sizes[i];
            else
                fprintf(stderr, "vsocket-sweep: skipping size %zu (over the UDP limit 65507)\n",
                        sizes[i]);
        if (k == 0)
            usage_exit("no size fits in a UDP datagram (max 65507)", NULL);
        co.nsizes = k;
    }
    return client_main(&co);
}
