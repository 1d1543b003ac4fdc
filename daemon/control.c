/*
 * control.c - the control requests a session may make besides a task's own messages: STATUS,
 * METRICS, CONFIG_GET and CONFIG_SET, and carrying a changed option over to the scheduler
 * (design: daemon.h; the loop that dispatches them: server.c).
 *
 * Design notes
 *   Every request is answered on the session that asked (ms_daemon_reply), or with one ERROR
 *   naming why; nothing here closes a session itself (a client that does not read its replies
 *   is dropped by ms_daemon_reply like any slow client). CONFIG_SET is an admin's: the new
 *   value is checked on a copy of the configuration, which replaces the daemon's only when it
 *   passes ms_conf_check, so a refused change leaves everything as it was. Options the scheduler
 *   reads at its next decision are copied into its config; those with a setter go through it
 *   (budget, slice, policy, evict, share), so the scheduler's invariants hold at once.
 */
#include "daemon/daemon.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

void ms_daemon_do_status(struct ms_daemon *d, struct ms_session *s, const struct ms_msg *req)
{
    struct ms_msg r;
    if (ms_sched_status(&d->sched, ms_daemon_now_ns(), &r) != MS_OK) {
        ms_daemon_reply_error(d, s, req->seq, MS_E_NOMEM, "out of memory");
        return;
    }
    r.status.daemon_pid = (uint32_t)getpid();
    r.status.gpu = d->conf.gpu;
    r.seq = req->seq;
    ms_daemon_reply(d, s, &r);
    ms_msg_free(&r);
}

int ms_daemon_metrics(struct ms_daemon *d, struct ms_buf *out)
{
    struct ms_msg st;
    int rc = ms_sched_status(&d->sched, ms_daemon_now_ns(), &st);
    if (rc)
        return rc;
    st.status.daemon_pid = (uint32_t)getpid();
    st.status.gpu = d->conf.gpu;
    d->st.switch_stop_ns = d->sched.stop_ns_total;
    d->st.idle_holds = d->sched.idle_holds;
    d->st.idle_resumes = d->sched.idle_resumes;
    d->st.refills = d->sched.refills;
    d->st.prepares = d->sched.prepares;
    d->st.prepare_bytes = d->sched.prepare_bytes;
    long *uids = ms_calloc(st.status.ntasks ? st.status.ntasks : 1, sizeof(*uids));
    if (!uids) {
        ms_msg_free(&st);
        return MS_E_NOMEM;
    }
    for (uint32_t i = 0; i < st.status.ntasks; i++) {
        const struct ms_session *s = ms_daemon_session_of_task(d, st.status.tasks[i].task);
        uids[i] = s ? (long)s->uid : -1;
    }
    rc = ms_metrics_text(&st.status, &d->st, d->nsessions, uids, out);
    ms_free(uids);
    ms_msg_free(&st);
    return rc;
}

void ms_daemon_do_metrics(struct ms_daemon *d, struct ms_session *s, const struct ms_msg *req)
{
    struct ms_msg r;
    struct ms_buf text;
    ms_buf_init(&text);
    int rc = ms_daemon_metrics(d, &text);
    ms_msg_init(&r, MS_MSG_METRICS);
    if (!rc) {
        r.metrics.text = ms_malloc(text.len + 1);
        if (!r.metrics.text)
            rc = MS_E_NOMEM;
    }
    if (rc) {
        ms_buf_fini(&text);
        ms_daemon_reply_error(d, s, req->seq, rc, "cannot build metrics");
        return;
    }
    memcpy(r.metrics.text, text.data, text.len);
    r.metrics.text[text.len] = '\0';
    r.metrics.len = (uint32_t)text.len;
    ms_buf_fini(&text);
    r.seq = req->seq;
    ms_daemon_reply(d, s, &r);
    ms_msg_free(&r);
}

void ms_daemon_do_config_get(struct ms_daemon *d, struct ms_session *s, const struct ms_msg *req)
{
    size_t n;
    const struct ms_conf_opt *o = ms_conf_opts(&n);
    const char *key = req->config.kv.key;
    struct ms_msg r;
    ms_msg_init(&r, MS_MSG_CONFIG);
    r.seq = req->seq;
    r.config.pairs = ms_calloc(n, sizeof(*r.config.pairs));
    if (!r.config.pairs) {
        ms_daemon_reply_error(d, s, req->seq, MS_E_NOMEM, "out of memory");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (key[0] && strcmp(key, o[i].name) != 0)
            continue;
        struct ms_kv *kv = &r.config.pairs[r.config.npairs];
        snprintf(kv->key, sizeof(kv->key), "%s", o[i].name);
        if (ms_conf_get(&d->conf, o[i].name, kv->value, sizeof(kv->value)) == MS_OK)
            r.config.npairs++;
    }
    if (r.config.npairs == 0) {
        ms_msg_free(&r);
        char text[128];
        snprintf(text, sizeof(text), "unknown option '%s'", key);
        ms_daemon_reply_error(d, s, req->seq, MS_E_NOTFOUND, text);
        return;
    }
    ms_daemon_reply(d, s, &r);
    ms_msg_free(&r);
}

/* Carry a runtime option over to the scheduler and the log. */
void ms_daemon_apply_option(struct ms_daemon *d, const char *key)
{
    uint64_t now = ms_daemon_now_ns();
    struct ms_sched_config sc;
    ms_conf_to_sched(&d->conf, &sc);
    if (strcmp(key, "budget") == 0)
        ms_sched_set_budget(&d->sched, now, sc.budget);
    else if (strcmp(key, "slice") == 0)
        ms_sched_set_slice(&d->sched, now, sc.slice_ns);
    else if (strcmp(key, "policy") == 0)
        ms_sched_set_policy(&d->sched, now, sc.policy);
    else if (strcmp(key, "evict") == 0)
        ms_sched_set_evict(&d->sched, now, sc.evict);
    else if (strcmp(key, "share") == 0)
        ms_sched_set_share(&d->sched, now, sc.share);
    else if (strcmp(key, "log_level") == 0)
        ms_log_set_level((enum ms_log_level)d->conf.log_level);
    /* The rest are read by the scheduler at its next decision. */
    d->sched.cfg.slice_max_ns = sc.slice_max_ns;
    d->sched.cfg.switch_frac_pct = sc.switch_frac_pct;
    d->sched.cfg.cost = sc.cost;
    d->sched.cfg.stop_timeout_ns = sc.stop_timeout_ns;
    d->sched.cfg.order_timeout_ns = sc.order_timeout_ns;
    d->sched.cfg.horizon = sc.horizon;
    d->sched.cfg.early_run = sc.early_run;
    d->sched.cfg.idle_hold_ns = sc.idle_hold_ns;
    d->sched.cfg.prepare_host = sc.prepare_host;
}

/* Who may do what an admin may, for error texts. */
void ms_daemon_admins(const struct ms_daemon *d, char *buf, size_t len)
{
    if (d->conf.admin_group[0])
        snprintf(buf, len, "uid %u, root or group %s", (unsigned)geteuid(), d->conf.admin_group);
    else
        snprintf(buf, len, "uid %u or root", (unsigned)geteuid());
}

void ms_daemon_do_config_set(struct ms_daemon *d, struct ms_session *s, const struct ms_msg *req)
{
    if (!s->admin) {
        char who[96], text[200];
        ms_daemon_admins(d, who, sizeof(who));
        snprintf(text, sizeof(text), "changing the configuration needs an admin (%s)", who);
        ms_log_warn("uid %u (pid %d) may not set %s", (unsigned)s->uid, (int)s->pid,
                    req->config.kv.key);
        ms_daemon_reply_error(d, s, req->seq, MS_E_STATE, text);
        return;
    }
    struct ms_conf c = d->conf;
    char why[256];
    const char *key = req->config.kv.key;
    int rc = ms_conf_set(&c, key, req->config.kv.value, true, why, sizeof(why));
    if (!rc)
        rc = ms_conf_check(&c, why, sizeof(why));
    if (rc) {
        ms_daemon_reply_error(d, s, req->seq, rc, why);
        return;
    }
    d->conf = c;
    ms_daemon_apply_option(d, key);
    char val[MS_PROTO_VALUE_MAX + 1];
    ms_conf_get(&d->conf, key, val, sizeof(val));
    ms_log_info("configuration: %s = %s", key, val);
    struct ms_msg get = *req;
    get.type = MS_MSG_CONFIG_GET;
    ms_daemon_do_config_get(d, s, &get);
}
