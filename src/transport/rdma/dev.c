/* dev.c - the rdma transport's per-process state (dev.h). */
#include "transport/rdma/dev.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>

#include "base/real.h"
#include "config/log.h"
#include "core/ownfd.h"
#include "core/reason.h"
#include "transport/rdma/conn.h"
#include "transport/rdma/rdma.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rdma_event_channel *channel;
static bool tried, unusable;
static const char *unusable_why;
/* Set while the program changes its credentials, and for good after. */
static const char *retired;

static bool devices_present(void)
{
    DIR *d = opendir("/sys/class/infiniband");
    if (!d)
        return false;
    struct dirent *e;
    bool any = false;
    while (!any && (e = readdir(d)))
        any = e->d_name[0] != '.';
    closedir(d);
    return any;
}

bool vs_rdma_dev_channel_possible(void)
{
    return devices_present();
}

static struct rdma_event_channel *open_channel(const char **why)
{
    if (!devices_present()) {
        *why = VS_REASON_NO_RDMA_DEVICE;
        return NULL;
    }
    struct rdma_event_channel *ch = rdma_create_event_channel();
    if (!ch) {
        vs_info("rdma: rdma_cm unusable (%s): connections stay on TCP", strerror(errno));
        *why = VS_REASON_NO_RDMA_DEVICE;
        return NULL;
    }
    int fl = vs_real.fcntl(ch->fd, F_GETFL);
    vs_real.fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
    vs_real.fcntl(ch->fd, F_SETFD, FD_CLOEXEC);
    ch->fd = vs_ownfd_take(ch->fd, &channel, NULL);
    return ch;
}

struct rdma_event_channel *vs_rdma_dev_channel(const char **why)
{
    pthread_mutex_lock(&lock);
    if (!tried) {
        tried = true;
        channel = open_channel(&unusable_why);
        unusable = !channel;
    }
    struct rdma_event_channel *ch = retired ? NULL : channel;
    if (retired)
        *why = retired;
    else if (!ch)
        *why = unusable_why ? unusable_why : VS_REASON_NO_RDMA_DEVICE;
    pthread_mutex_unlock(&lock);
    return ch;
}

void vs_rdma_dev_lock(void)
{
    pthread_mutex_lock(&cm_lock);
}

void vs_rdma_dev_unlock(void)
{
    pthread_mutex_unlock(&cm_lock);
}

static struct vs_rdma_conn *conn_of_event(const struct rdma_cm_event *ev)
{
    if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
        return ev->listen_id ? ev->listen_id->context : NULL;
    return ev->id ? ev->id->context : NULL;
}

void vs_rdma_dev_events(void)
{
    if (!channel)
        return;
    pthread_mutex_lock(&cm_lock);
    struct rdma_cm_event *ev;
    while (channel && rdma_get_cm_event(channel, &ev) == 0) {
        struct vs_rdma_conn *c = conn_of_event(ev);
        struct vs_rdma_event copy = {.type = ev->event, .status = ev->status, .id = ev->id};
        const void *pd = ev->param.conn.private_data;
        uint8_t len = ev->param.conn.private_data_len;
        if (pd && len) {
            copy.pdata_len = len < sizeof(copy.pdata) ? len : (uint8_t)sizeof(copy.pdata);
            memcpy(copy.pdata, pd, copy.pdata_len);
        }
        rdma_ack_cm_event(ev);
        if (c)
            vs_rdma_on_cm_event(c, &copy);
        else if (copy.type == RDMA_CM_EVENT_CONNECT_REQUEST)
            rdma_destroy_id(copy.id); /* its listener is gone */
    }
    pthread_mutex_unlock(&cm_lock);
}

bool vs_rdma_dev_retire(const char *why)
{
    pthread_mutex_lock(&lock);
    bool now = channel && !retired;
    if (now)
        retired = why;
    pthread_mutex_unlock(&lock);
    return now;
}

void vs_rdma_dev_unretire(void)
{
    pthread_mutex_lock(&lock);
    retired = NULL;
    pthread_mutex_unlock(&lock);
}

void vs_rdma_dev_fork_child(void)
{
    if (!tried)
        return;
    /* The channel's file is the parent's: reading it would take its events. */
    channel = NULL;
    unusable = true;
    unusable_why = VS_REASON_RDMA_FORKED;
}
