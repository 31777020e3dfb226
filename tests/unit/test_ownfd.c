/* test_ownfd.c - vsocket's own descriptors (core/ownfd.h): moved above the
 * floor, close-on-exec, closed only while still ours, given up to a program
 * that takes the number (its owner told first, the number left open for the
 * program's own call to close). */
#include <fcntl.h>
#include <unistd.h>

#include "check.h"
#include "config/config.h"
#include "core/ownfd.h"

static int lost_calls, lost_fd = -1;

static void on_lost(void *owner, int fd, unsigned first, unsigned last)
{
    CHECK((unsigned)fd >= first && (unsigned)fd <= last);
    CHECK(vs_ownfd_mine(fd, owner)); /* still ours while told */
    CHECK(owner == &lost_calls);
    /* Told while the number is still ours: it must still be open. */
    CHECK(fcntl(fd, F_GETFD) >= 0);
    lost_calls++;
    lost_fd = fd;
}

static int new_fd(void)
{
    int p[2];
    CHECK(pipe(p) == 0);
    close(p[1]);
    return p[0];
}

static void test_take_moves_and_closes(void)
{
    int floor = vs_ownfd_floor();
    CHECK(floor > 2);
    int raw = new_fd();
    CHECK(raw < floor);
    int fd = vs_ownfd_take(raw, &lost_calls, on_lost);
    CHECK(fd >= floor);
    CHECK(fcntl(raw, F_GETFD) < 0); /* the low number was given back */
    CHECK(fcntl(fd, F_GETFD) == FD_CLOEXEC);
    CHECK(vs_ownfd_is_ours(fd));
    CHECK(vs_ownfd_mine(fd, &lost_calls));
    CHECK(!vs_ownfd_mine(fd, &floor));
    vs_ownfd_close(fd, &floor); /* another owner: left alone */
    CHECK(fcntl(fd, F_GETFD) >= 0);
    vs_ownfd_close(fd, &lost_calls);
    CHECK(fcntl(fd, F_GETFD) < 0);
    CHECK(!vs_ownfd_is_ours(fd));
    CHECK_EQ(lost_calls, 0);
}

/* The program dup2s its own file onto our number: the owner is told, and
 * its later close leaves the program's file alone. */
static void test_taken_by_program(void)
{
    int fd = vs_ownfd_take(new_fd(), &lost_calls, on_lost);
    int mine = new_fd();
    vs_ownfd_taken((unsigned)fd, (unsigned)fd);
    CHECK_EQ(lost_calls, 1);
    CHECK_EQ(lost_fd, fd);
    CHECK(!vs_ownfd_is_ours(fd));
    CHECK(!vs_ownfd_mine(fd, &lost_calls));
    CHECK(dup2(mine, fd) == fd); /* the program's call */
    vs_ownfd_close(fd, &lost_calls);
    CHECK(fcntl(fd, F_GETFD) >= 0); /* still the program's */
    close(fd);
    close(mine);
    /* A range the numbers fall in, and one they do not. */
    int a = vs_ownfd_take(new_fd(), &lost_calls, on_lost);
    vs_ownfd_taken(0, (unsigned)a - 1);
    CHECK_EQ(lost_calls, 1);
    vs_ownfd_taken(3, ~0u);
    CHECK_EQ(lost_calls, 2);
    close(a);
}

int main(void)
{
    vs_config_defaults(&vs_config);
    test_take_moves_and_closes();
    test_taken_by_program();
    return check_finish("test_ownfd");
}
