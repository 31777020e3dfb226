/* signals.h - what the installed signal handlers ask of interrupted calls.
 *
 * A blocking call that vsocket serves itself sleeps in ppoll(), which the
 * kernel never restarts. To behave like the socket call it replaces, it
 * restarts after a handler only when every installed handler was set up
 * with SA_RESTART (sigaction and signal are interposed to know: they tell
 * this record, interpose/signal_api.c; the transports read it).
 *
 * The kernel ends a socket call's sleep when a signal came at any moment
 * of the call, its copy included, since the signal stays pending until the
 * call returns. vsocket copies in user space, where the handler runs at
 * once: then nothing is pending when it sleeps, and a program whose handler
 * only sets a flag (every Python program, servers that stop on SIGTERM)
 * would sleep on. So a handler without SA_RESTART runs through ours, which
 * counts its runs per thread; a call notes the count when it starts and
 * does not sleep (or stops sleeping) once it moved. */
#ifndef VSOCKET_SIGNALS_H
#define VSOCKET_SIGNALS_H

#include <signal.h>
#include <stdbool.h>
#include <time.h>

/* SIG's handler was set: CATCHES (a function, not SIG_DFL or SIG_IGN),
 * installed with SA_RESTART or not. */
void vs_signals_note(int sig, bool catches, bool restarts);

/* True when no installed handler lacks SA_RESTART. */
bool vs_signals_restart(void);

/* ---- the program's handlers, in front of which ours runs */

/* The action the kernel gets for the program's ACT on SIG: ACT itself, or
 * a copy in *MINE with our handler in front of the program's (recorded
 * here; *PREV gets what was recorded before, for vs_signals_installed_undo
 * and vs_signals_program). */
const struct sigaction *vs_signals_install(int sig, const struct sigaction *act,
                                           struct sigaction *mine, struct sigaction *prev);

/* After the kernel took (OK) or refused the action install gave it. */
void vs_signals_installed(int sig, const struct sigaction *act, bool ok,
                          const struct sigaction *prev);

/* OLD as the kernel reported it, made the program's: where the kernel
 * has our handler, the program's action PREV that it stands for. */
void vs_signals_program(struct sigaction *old, const struct sigaction *prev);

/* ---- the calls' side */

/* A mark of the handlers that ran on this thread so far. */
unsigned vs_signals_mark(void);

/* True when a handler ran since MARK. */
bool vs_signals_ran(unsigned mark);

/* Around a socket call served by a transport (interpose/io_api.c): the
 * mark its waits compare with, kept for the whole call (sendfile's chunks,
 * a send resumed after a switch). Begin gives the mark of a call this one
 * interrupted (a handler's own call), to give back at the end. */
unsigned vs_signals_call_begin(void);
void vs_signals_call_end(unsigned outer);
unsigned vs_signals_call_mark(void);

/* What a sleep keeps of one it interrupted (vs_signals_sleep_begin). */
struct vs_sleep_guard {
    struct timespec *outer;
    struct timespec outer_ts;
};

/* Before a sleep of a call that started at MARK, whose timeout is **TS
 * (*TS NULL: none): *TS then names the timeout the sleep must use, zero
 * when a handler ran since MARK, and zeroed by a handler that runs before
 * the sleep starts (the kernel reads it as the sleep begins). A sleep
 * without a timeout gets a long one (its caller's loop looks again). So the
 * sleep ends at once, and the caller still sees what is ready. */
void vs_signals_sleep_begin(unsigned mark, struct timespec **ts, struct vs_sleep_guard *g);

/* After that sleep: true when a handler ran since MARK (the call is
 * interrupted, as the kernel's would be, unless something was ready). */
bool vs_signals_sleep_end(unsigned mark, const struct vs_sleep_guard *g);

#endif
