/* vsocket-stress: command line, self-contained mode, reporting and exit codes. */
#include "stress.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum role { ROLE_SELF, ROLE_SERVER, ROLE_CLIENT };

struct args {
    enum role role;
    int mode; /* -1 = all */
    struct config cfg;
    const char *host, *bind_addr;
    uint16_t port;
    bool ipv6, quiet, once, seed_given;
    double seconds;
    int kill_peer_after_ms;
    int ready_fd;
};

static void usage_exit(const char *fmt, const char *arg)
{
    if (fmt) {
        fprintf(stderr, "vsocket-stress: ");
        fprintf(stderr, fmt, arg);
        fprintf(stderr, "\n");
    }
    fprintf(stderr,
            "usage: vsocket-stress [options]                  (server + client, self-contained)\n"
            "       vsocket-stress server --port P [--bind ADDR] [--once]\n"
            "       vsocket-stress client --host H --port P [options]\n"
            "options: --mode blocking|poll|epoll-lt|epoll-et|threads|all (default all)\n"
            "         --conns N (4)  --udp-flows N (2)  --messages N (50)\n"
            "         --min-size B (1)  --max-size B (4M)  --udp-max-size B (8K)\n"
            "         --seconds S (60)  --seed N  --ipv6  --quiet  --kill-peer-after MS\n"
            "         --inject-corruption payload|header|loss|reorder|udp (checker self-test)\n"
            "see tools/stress/README.md\n");
    exit(EXIT_USAGE);
}

/* Integer with an optional K/M/G (binary) suffix. */
static uint64_t parse_num(const char *s, const char *what)
{
    uint64_t v;
    if (tool_parse_size(s, &v) < 0)
        usage_exit("bad number for %s", what);
    return v;
}

static int parse_mode(const char *s)
{
    if (!strcmp(s, "all"))
        return -1;
    for (int m = 0; m < MODE_COUNT; m++)
        if (!strcmp(s, mode_name((enum mode)m)))
            return m;
    usage_exit("unknown --mode '%s'", s);
    return -1;
}

static enum inject parse_inject(const char *s)
{
    static const char *const names[] = {"none", "payload", "header", "loss", "reorder", "udp"};
    for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(s, names[i]))
            return (enum inject)i;
    usage_exit("unknown --inject-corruption '%s'", s);
    return INJECT_NONE;
}

static void parse_option(struct args *a, int opt, const char *arg)
{
    switch (opt) {
    case 'm':
        a->mode = parse_mode(arg);
        break;
    case 'c':
        a->cfg.conns = (uint32_t)parse_num(arg, "--conns");
        break;
    case 'u':
        a->cfg.udp_flows = (uint32_t)parse_num(arg, "--udp-flows");
        break;
    case 'n':
        a->cfg.messages = parse_num(arg, "--messages");
        break;
    case 'a':
        a->cfg.min_size = parse_num(arg, "--min-size");
        break;
    case 'b':
        a->cfg.max_size = parse_num(arg, "--max-size");
        break;
    case 'd':
        a->cfg.udp_max_size = parse_num(arg, "--udp-max-size");
        break;
    case 's':
        a->seconds = strtod(arg, NULL);
        break;
    case 'S':
        a->cfg.seed = parse_num(arg, "--seed");
        a->seed_given = true;
        break;
    case '6':
        a->ipv6 = true;
        break;
    case 'q':
        a->quiet = true;
        break;
    case 'h':
        a->host = arg;
        break;
    case 'p':
        a->port = (uint16_t)parse_num(arg, "--port");
        break;
    case 'B':
        a->bind_addr = arg;
        break;
    case 'o':
        a->once = true;
        break;
    case 'k':
        a->kill_peer_after_ms = (int)parse_num(arg, "--kill-peer-after");
        break;
    case 'i':
        a->cfg.inject = parse_inject(arg);
        break;
    case 'r':
        a->ready_fd = (int)parse_num(arg, "--ready-fd");
        break;
    default:
        usage_exit(NULL, NULL);
    }
}

static void validate(const struct args *a)
{
    const struct config *c = &a->cfg;
    if (c->conns < 1 || c->conns > 1024)
        usage_exit("--conns must be 1..1024%s", "");
    if (c->messages < 1 || c->messages > (1ULL << 32))
        usage_exit("--messages must be 1..2^32%s", "");
    if (c->min_size < 1 || c->min_size > c->max_size || c->max_size > (1ULL << 30))
        usage_exit("need 1 <= --min-size <= --max-size <= 1G%s", "");
    if (c->udp_max_size < 1 || c->udp_max_size + HDR_SIZE > 65507)
        usage_exit("--udp-max-size must be 1..%s", "65459");
    if (c->udp_flows > 256)
        usage_exit("--udp-flows must be 0..256%s", "");
    if (!(a->seconds > 0))
        usage_exit("--seconds must be positive%s", "");
    if (a->role == ROLE_CLIENT && (!a->host || !a->port))
        usage_exit("client needs --host and --port%s", "");
    if (a->role == ROLE_SERVER && !a->port && a->ready_fd < 0)
        usage_exit("server needs --port%s", "");
    if (a->role == ROLE_SERVER && a->kill_peer_after_ms >= 0)
        usage_exit("--kill-peer-after is a client option%s", "");
}

static void parse_args(struct args *a, int argc, char **argv)
{
    static const struct option opts[] = {{"mode", 1, 0, 'm'},
                                         {"conns", 1, 0, 'c'},
                                         {"udp-flows", 1, 0, 'u'},
                                         {"messages", 1, 0, 'n'},
                                         {"min-size", 1, 0, 'a'},
                                         {"max-size", 1, 0, 'b'},
                                         {"udp-max-size", 1, 0, 'd'},
                                         {"seconds", 1, 0, 's'},
                                         {"seed", 1, 0, 'S'},
                                         {"ipv6", 0, 0, '6'},
                                         {"quiet", 0, 0, 'q'},
                                         {"host", 1, 0, 'h'},
                                         {"port", 1, 0, 'p'},
                                         {"bind", 1, 0, 'B'},
                                         {"once", 0, 0, 'o'},
                                         {"kill-peer-after", 1, 0, 'k'},
                                         {"inject-corruption", 1, 0, 'i'},
                                         {"ready-fd", 1, 0, 'r'},
                                         {"help", 0, 0, '?'},
                                         {0, 0, 0, 0}};
    *a = (struct args){.role = ROLE_SELF,
                       .mode = -1,
                       .seconds = 60,
                       .kill_peer_after_ms = -1,
                       .ready_fd = -1,
                       .cfg = {.conns = 4,
                               .udp_flows = 2,
                               .messages = 50,
                               .min_size = 1,
                               .max_size = 4 << 20,
                               .udp_max_size = 8192}};
    int first = 1;
    if (argc > 1 && !strcmp(argv[1], "server"))
        a->role = ROLE_SERVER, first = 2;
    else if (argc > 1 && !strcmp(argv[1], "client"))
        a->role = ROLE_CLIENT, first = 2;
    optind = first;
    int opt;
    while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1)
        parse_option(a, opt, optarg);
    if (optind < argc)
        usage_exit("unexpected argument '%s'", argv[optind]);
    if (!a->seed_given)
        a->cfg.seed = mix64(now_ns() ^ ((uint64_t)getpid() << 32)) & 0xffffffffffffULL;
    validate(a);
}

/* ------------------------------------------------------------ watchdog */

/* Last line of defence against a hang: every wait in the tool is bounded, but if
 * something still blocks past the deadline, say so and exit 3. */
static volatile pid_t g_server_pid;
static uint64_t g_watchdog_at_ns;

static void *watchdog(void *arg)
{
    (void)arg;
    uint64_t at = g_watchdog_at_ns;
    struct timespec ts = {(time_t)(at / 1000000000ULL), (long)(at % 1000000000ULL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
    fprintf(stderr, "vsocket-stress: TIMEOUT: the run did not finish within --seconds "
                    "(watchdog); giving up\n");
    if (g_server_pid > 0)
        kill(g_server_pid, SIGKILL);
    _exit(EXIT_SETUP);
}

static void watchdog_start(uint64_t at_ns)
{
    pthread_t t;
    g_watchdog_at_ns = at_ns;
    pthread_create(&t, NULL, watchdog, NULL);
    pthread_detach(t);
}

/* ------------------------------------------------------ self-contained */

/* Start `vsocket-stress server --port 0 --once` as a fresh process (fork + exec,
 * so a preloaded library initialises in it from scratch) and learn its port. */
static pid_t spawn_server(const struct args *a, uint16_t *port)
{
    int p[2];
    if (pipe(p) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        char fd[16];
        snprintf(fd, sizeof(fd), "%d", p[1]);
        close(p[0]);
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the client */
        char *argv[12];
        int n = 0;
        argv[n++] = "vsocket-stress";
        argv[n++] = "server";
        argv[n++] = "--port";
        argv[n++] = "0";
        argv[n++] = "--bind";
        argv[n++] = a->ipv6 ? "::1" : "127.0.0.1";
        argv[n++] = "--once";
        argv[n++] = "--ready-fd";
        argv[n++] = fd;
        if (a->ipv6)
            argv[n++] = "--ipv6";
        /* The client prints both sides; the server speaks only when it fails. */
        argv[n++] = "--quiet";
        argv[n] = NULL;
        execv("/proc/self/exe", argv);
        perror("vsocket-stress: exec server");
        _exit(EXIT_SETUP);
    }
    close(p[1]);
    char buf[16] = {0};
    struct pollfd pf = {p[0], POLLIN, 0};
    ssize_t k = -1;
    if (pid > 0 && poll(&pf, 1, 10000) == 1)
        k = read(p[0], buf, sizeof(buf) - 1);
    close(p[0]);
    if (pid < 0 || k <= 0) {
        if (pid > 0)
            kill(pid, SIGKILL), waitpid(pid, NULL, 0);
        return -1;
    }
    *port = (uint16_t)atoi(buf);
    return pid;
}

/* Returns the server's exit code, or -1 when it had to be killed / was killed. */
static int reap_server(pid_t pid)
{
    int st;
    for (int i = 0; i < 300; i++) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        if (r < 0)
            return -1;
        usleep(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* ---------------------------------------------------------- reporting */

static const char *result_word(int status)
{
    return status == EXIT_PASS ? "PASS" : status == EXIT_DATA ? "FAIL" : "ERROR";
}

static void print_side(const char *who, const struct side_result *s, uint32_t conns)
{
    printf("  %s received: conns_ok=%llu/%u bytes=%llu msgs=%llu lost=%llu corrupt=%llu "
           "(bytes %llu) reordered=%llu peer_gone=%llu errors=%llu\n",
           who, (unsigned long long)s->conns_ok, conns, (unsigned long long)s->bytes,
           (unsigned long long)s->msgs, (unsigned long long)s->lost, (unsigned long long)s->corrupt,
           (unsigned long long)s->corrupt_bytes, (unsigned long long)s->reordered,
           (unsigned long long)s->peer_gone, (unsigned long long)s->errors);
}

static void report(const struct args *a, enum mode m, const struct client_report *r, double secs)
{
    const struct side_result *c = &r->client, *s = &r->server;
    if (!a->quiet) {
        printf("mode %s: %.2f s\n", mode_name(m), secs);
        print_side("client", c, a->cfg.conns);
        if (r->have_server)
            print_side("server", s, a->cfg.conns);
        else
            printf("  server: no report%s\n", r->peer_killed ? " (killed)" : "");
        printf("  udp: flows=%u sent=%llu echoed=%llu lost=%llu late=%llu corrupt=%llu "
               "(server saw %llu corrupt)\n",
               a->cfg.udp_flows, (unsigned long long)r->udp.sent,
               (unsigned long long)r->udp.received, (unsigned long long)r->udp.lost,
               (unsigned long long)r->udp.late, (unsigned long long)r->udp.corrupt,
               (unsigned long long)r->server_udp_corrupt);
        if (r->peer_killed)
            printf("  peer-killed: server killed after %d ms; connections ended with "
                   "EOF/ECONNRESET: %llu/%u\n",
                   a->kill_peer_after_ms, (unsigned long long)c->peer_gone + c->conns_ok,
                   a->cfg.conns);
    }
    if (r->why)
        fprintf(stderr, "vsocket-stress: mode %s: %s\n", mode_name(m), r->why);
    printf("stress: mode=%s tcp_conns=%u bytes=%llu lost=%llu corrupt=%llu reordered=%llu "
           "udp_sent=%llu udp_lost=%llu udp_corrupt=%llu%s result=%s\n",
           mode_name(m), a->cfg.conns, (unsigned long long)(c->bytes + s->bytes),
           (unsigned long long)(c->lost + s->lost), (unsigned long long)(c->corrupt + s->corrupt),
           (unsigned long long)(c->reordered + s->reordered), (unsigned long long)r->udp.sent,
           (unsigned long long)r->udp.lost,
           (unsigned long long)(r->udp.corrupt + r->server_udp_corrupt),
           r->peer_killed ? " peer=killed" : "",
           r->status == EXIT_SETUP && r->why && strstr(r->why, "time-out")
               ? "TIMEOUT"
               : result_word(r->status));
    fflush(stdout);
}

static int run_mode(const struct args *a, enum mode m, uint64_t deadline)
{
    struct config cfg = a->cfg;
    cfg.mode = m;
    uint64_t left_ms = deadline > now_ns() ? (deadline - now_ns()) / 1000000 : 0;
    cfg.timeout_ms = left_ms + 1000;
    struct client_opts co = {a->host, a->port, a->ipv6, a->quiet, deadline, a->kill_peer_after_ms};
    pid_t pid = 0;
    if (a->role == ROLE_SELF) {
        co.host = a->ipv6 ? "::1" : "127.0.0.1";
        pid = spawn_server(a, &co.port);
        if (pid < 0) {
            fprintf(stderr, "vsocket-stress: cannot start the server process\n");
            return EXIT_SETUP;
        }
        g_server_pid = pid;
    }
    struct client_report r;
    uint64_t t0 = now_ns();
    client_run(&cfg, &co, &r);
    double secs = (double)(now_ns() - t0) / 1e9;
    if (pid > 0) {
        int rc = reap_server(pid);
        g_server_pid = 0;
        /* A server that fails after reporting (e.g. a sanitizer error at exit) fails the run. */
        if (!r.peer_killed && rc != EXIT_PASS && r.status == EXIT_PASS) {
            fprintf(stderr, "vsocket-stress: the server process exited with %d\n", rc);
            r.status = EXIT_DATA;
        }
    }
    report(a, m, &r, secs);
    return r.status;
}

static int run_client(const struct args *a)
{
    uint64_t deadline = now_ns() + (uint64_t)(a->seconds * 1e9);
    watchdog_start(deadline + 3000000000ULL);
    if (!a->quiet)
        printf("vsocket-stress: seed=%llu conns=%u messages=%llu sizes=%llu..%llu udp_flows=%u "
               "(reproduce with --seed %llu)\n",
               (unsigned long long)a->cfg.seed, a->cfg.conns, (unsigned long long)a->cfg.messages,
               (unsigned long long)a->cfg.min_size, (unsigned long long)a->cfg.max_size,
               a->cfg.udp_flows, (unsigned long long)a->cfg.seed);
    fflush(stdout);
    int worst = EXIT_PASS;
    for (int m = 0; m < MODE_COUNT; m++) {
        if (a->mode >= 0 && m != a->mode)
            continue;
        int st = run_mode(a, (enum mode)m, deadline);
        if (st == EXIT_SETUP || worst == EXIT_PASS)
            worst = st;
        if (st == EXIT_SETUP)
            break; /* a time-out or a broken setup: later modes would only repeat it */
    }
    if (worst != EXIT_PASS)
        fprintf(stderr, "vsocket-stress: %s (seed %llu)\n",
                worst == EXIT_DATA ? "data check FAILED" : "run aborted",
                (unsigned long long)a->cfg.seed);
    return worst;
}

int main(int argc, char **argv)
{
    struct args a;
    signal(SIGPIPE, SIG_IGN);
    parse_args(&a, argc, argv);
    if (a.role == ROLE_SERVER) {
        struct server_opts so = {a.bind_addr, a.port, a.ipv6, a.quiet, a.once, a.ready_fd};
        return server_run(&so);
    }
    return run_client(&a);
}
