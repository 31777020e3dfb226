/* fake_verbs.c - stands in for libibverbs.so.1 and librdmacm.so.1 in
 * tests/tool/test_doctor_rdma.sh (built twice, under both names). It
 * defines every function `vsocket doctor`'s UD checks resolve, and the first
 * one they call misbehaves as FAKE_VERBS says: "hang" sleeps forever,
 * anything else aborts. The test sees the checks' child killed at its
 * deadline, or dead, and the tool carry on. FAKE_VERBS_PIDFILE, when set,
 * gets the misbehaving process's pid first, so the test can see it is gone
 * afterwards. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void misbehave(void)
{
    const char *how = getenv("FAKE_VERBS");
    const char *pidfile = getenv("FAKE_VERBS_PIDFILE");
    FILE *f = pidfile ? fopen(pidfile, "w") : NULL;
    if (f) {
        fprintf(f, "%d\n", (int)getpid());
        fclose(f);
    }
    if (how && strcmp(how, "hang") == 0)
        for (;;)
            pause();
    abort();
}

/* The signatures do not matter: only the names are looked up, and only
 * the first call is ever made. */
#define FAKE(name)                                                                                 \
    void *name(void);                                                                              \
    void *name(void)                                                                               \
    {                                                                                              \
        misbehave();                                                                               \
        return NULL;                                                                               \
    }

FAKE(ibv_get_device_list)
FAKE(ibv_free_device_list)
FAKE(ibv_get_device_name)
FAKE(ibv_open_device)
FAKE(ibv_close_device)
FAKE(ibv_query_device)
FAKE(ibv_query_port)
FAKE(ibv_query_gid)
FAKE(ibv_alloc_pd)
FAKE(ibv_dealloc_pd)
FAKE(ibv_reg_mr)
FAKE(ibv_dereg_mr)
FAKE(ibv_create_cq)
FAKE(ibv_destroy_cq)
FAKE(ibv_create_qp)
FAKE(ibv_modify_qp)
FAKE(ibv_destroy_qp)
FAKE(ibv_create_ah)
FAKE(ibv_destroy_ah)
FAKE(ibv_wc_status_str)
FAKE(rdma_create_event_channel)
FAKE(rdma_destroy_event_channel)
FAKE(rdma_create_id)
FAKE(rdma_destroy_id)
FAKE(rdma_bind_addr)
FAKE(rdma_listen)
FAKE(rdma_get_src_port)
