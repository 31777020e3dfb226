/* signals.h - what the installed signal handlers ask of interrupted calls.
 *
 * A blocking call that vsocket serves itself sleeps in ppoll(), which the
 * kernel never restarts. To behave like the socket call it replaces, it
 * restarts after a handler only when every installed handler was set up
 * with SA_RESTART (sigaction and signal are interposed to know: they tell
 * this record, interpose/signal_api.c; the transports read it). */
#ifndef VSOCKET_SIGNALS_H
#define VSOCKET_SIGNALS_H

#include <stdbool.h>

/* SIG's handler was set: CATCHES (a function, not SIG_DFL or SIG_IGN),
 * installed with SA_RESTART or not. */
void vs_signals_note(int sig, bool catches, bool restarts);

/* True when no installed handler lacks SA_RESTART. */
bool vs_signals_restart(void);

#endif
