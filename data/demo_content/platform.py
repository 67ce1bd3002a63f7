"""Platform scope: the Postgres cluster and pgbouncer, the conveyor job queue, deploys, on-call, security."""

from __future__ import annotations

from .model import Copy, Doc, page, thread

S = "platform"

DOCS: list[Doc] = []

# --- Postgres 16 upgrade: one meeting page with many items on one topic -----------------------------------
DOCS += page(
    "meetings/platform-weekly/2024-06-11.md",
    S,
    "Platform weekly 2024-06-11",
    "2024-06-11",
    "sam",
    ("meeting", "postgres", "pg16-upgrade"),
    [
        (
            "pw0611-sync",
            "PG16 status: the logical replica pg16-green is built from pg-main. Initial table sync took 31 hours, most "
            "of it the ledger_entries table (1.4 TB).",
        ),
        (
            "pw0611-why-slow",
            "Why the sync crawled: one sync worker per table, and max_sync_workers_per_subscription was 2. Hana raised "
            "it to 6 for the remaining tables, but ledger_entries is one table, so it can't be parallelised.",
        ),
        (
            "pw0611-sequences",
            "Lag on green is steady under 200 ms since catch-up. Sequences are NOT carried by logical replication: Hana "
            "has a script that copies setval() for all 214 sequences at cutover.",
        ),
        (
            "pw0611-cutover",
            "Cutover plan: Sunday 23 June, 02:00-03:00 UTC. Payments writes paused with the maintenance flag, conveyor "
            "workers scaled to zero, pgbouncer repointed, then writes resume.",
        ),
        (
            "pw0611-extensions",
            "Extension check: pg_stat_statements and pgcrypto are fine on 16. pg_partman has to go to 5.x on blue "
            "first, before cutover.",
        ),
        (
            "pw0611-rollback",
            "Rollback: blue (15.6) stays subscribed to green for 7 days, so we can fail back without losing writes.",
        ),
        (
            "pw0611-serializable",
            "Amara: ledger-writer runs SERIALIZABLE, so expect the PG-40001 retry rate to jump while caches warm after "
            "cutover. Agreed that's acceptable for an hour or two.",
        ),
        (
            "pw0611-helm",
            "The pgbouncer host switch to the green VIP goes through deploy/helm/values-prod.yaml in platform-infra like "
            "any other change, not kubectl edit.",
        ),
        (
            "pw0611-freeze",
            "Decision: no application deploys from Thursday 20 June until the cutover is done and verified.",
        ),
        (
            "pw0611-actions",
            "Actions: Hana - dry-run the sequence script on staging; Marcus - status page notice for the window; Leah - "
            "write the conveyor drain procedure.",
        ),
        (
            "pw0611-analyze",
            "Do we need ANALYZE after cutover? Yes: planner statistics don't travel over logical replication. Run "
            "vacuumdb --all --analyze-in-stages right after writes resume.",
        ),
    ],
)
DOCS += page(
    "meetings/platform-weekly/2024-06-25.md",
    S,
    "Platform weekly 2024-06-25",
    "2024-06-25",
    "sam",
    ("meeting", "postgres", "pg16-upgrade"),
    [
        (
            "pw0625-done",
            "PG16 cutover done on Sunday in 38 minutes against a planned 60. Writes were paused for 11 minutes.",
        ),
        (
            "pw0625-sequences",
            "One hiccup: two sequences were missed by the script because they belong to a column in the audit schema. "
            "That caused duplicate key errors on audit_log for four minutes until Hana fixed them by hand.",
        ),
        (
            "pw0625-latency",
            "p95 on the payments read path is down 18% since the upgrade. Nobody is sure which change did it; better "
            "statistics after the fresh ANALYZE is the favourite theory.",
        ),
        (
            "pw0625-blue",
            "Blue stays a subscriber until 30 June, then gets decommissioned. Backups already run against green.",
        ),
    ],
)
DOCS += page(
    "notes/hana-pg16-upgrade-log.md",
    S,
    "PG16 upgrade log",
    "2024-06-03",
    "hana",
    ("postgres", "pg16-upgrade"),
    [
        (
            "hana-log-plan",
            "Going blue/green with logical replication instead of pg_upgrade --link: pg_upgrade would mean a full outage "
            "of 20+ minutes on 2.1 TB plus no way back once writes land on the new cluster.",
        ),
        (
            "hana-log-publication",
            "Created publication pg16_all FOR ALL TABLES on blue. Tables without a primary key can't replicate UPDATEs; "
            "found three (two old audit tables and webhook_dedupe) and added keys.",
        ),
        (
            "hana-log-slot",
            "Watch the replication slot on blue while green catches up: WAL is retained until green confirms, and disk "
            "on blue went from 41% to 63% during the initial sync.",
        ),
    ],
    kind="note",
)
DOCS += [
    Doc(
        "pg16-summary",
        S,
        "note",
        "2024-07-01",
        "hana",
        "wiki/platform/postgres/history.md",
        "Postgres 16 upgrade recap",
        "June 2024: pg-main went from 15.6 to 16.2 blue/green over logical replication. 38-minute cutover, 11 minutes "
        "of paused writes, one sequence mistake in the audit schema, reads got faster. Old cluster removed 30 June.",
        ("postgres", "pg16-upgrade"),
    ),
    Doc(
        "adr011",
        S,
        "decision",
        "2024-05-21",
        "hana",
        "wiki/platform/adr/adr-011-pg16-upgrade.md",
        "ADR-011: upgrade Postgres with logical replication",
        "We move pg-main to Postgres 16 by building a new cluster and replicating into it logically, then switching "
        "pgbouncer over. Costs: sequences and DDL don't replicate, so schema changes are frozen during the "
        "migration and sequences are copied at cutover. Benefit: minutes of write pause instead of a long outage, "
        "and the old cluster stays a live fallback.",
        ("postgres", "adr", "pg16-upgrade"),
    ),
    Doc(
        "pg-cluster",
        S,
        "note",
        "2024-07-02",
        "hana",
        "wiki/platform/postgres/overview.md",
        "pg-main at a glance",
        "pg-main: Postgres 16.2 under Patroni 3.2, one primary and two replicas spread over eu-west-1a, 1b and 1c. "
        "pgbouncer 1.21 in transaction mode sits in front on port 6432. Apps never talk to 5432 directly.",
        ("postgres", "pgbouncer"),
    ),
    Doc(
        "pg-lag-alert",
        S,
        "note",
        "2024-04-11",
        "hana",
        "wiki/platform/postgres/alerts.md",
        "PgReplicationLagHigh",
        "PgReplicationLagHigh fires when replay lag on any replica stays above 30 s for 5 minutes. Usual causes: a "
        "long query on the replica holding back replay, or a huge batch delete on the primary. Check "
        "pg_stat_replication on the primary and pg_stat_activity on the replica.",
        ("postgres", "alerting"),
    ),
    Doc(
        "pg-readonly",
        S,
        "note",
        "2024-03-04",
        "hana",
        "wiki/platform/postgres/access.md",
        "Read access to production data",
        "Need to look at prod data? Request the pg-readonly role in #platform-access. Vault then issues 12-hour "
        "credentials: `vault read database/creds/pg-main-readonly`. Connect through the bastion with "
        "`nwctl db connect --replica`. Ad-hoc queries never go to the primary.",
        ("postgres", "access"),
    ),
    Doc(
        "pg-backups",
        S,
        "note",
        "2024-10-04",
        "hana",
        "wiki/platform/postgres/backups.md",
        "Backups and restores",
        "pgBackRest: full backup Sundays 01:00 UTC, differential every other night, WAL archived continuously to "
        "s3://nw-pg-wal-prod. Point-in-time recovery window is 14 days. The monthly restore test on 3 October took "
        "2h41m for 2.1 TB.",
        ("postgres", "backups"),
    ),
    Doc(
        "pg-timeouts",
        S,
        "note",
        "2024-02-27",
        "hana",
        "wiki/platform/postgres/overview.md",
        "Statement timeouts",
        "statement_timeout is 15 s for the app roles and 5 minutes for the reporting role. "
        "idle_in_transaction_session_timeout is 60 s for everyone; a worker that forgets to COMMIT gets cut off "
        "instead of holding locks.",
        ("postgres",),
    ),
    Doc(
        "pg-autovacuum",
        S,
        "note",
        "2024-08-13",
        "hana",
        "notes/hana.md",
        "Autovacuum on ledger_entries",
        "ledger_entries gets its own autovacuum settings: autovacuum_vacuum_scale_factor 0.01 and "
        "autovacuum_vacuum_cost_limit 2000. With the default 0.2 it only vacuumed after 60 million dead rows.",
        ("postgres", "vacuum"),
    ),
    Doc(
        "pg-patroni-list",
        S,
        "chat",
        "2024-05-02",
        "hana",
        "slack/#platform",
        "#platform",
        "Quick way to see who's primary: `patronictl -c /etc/patroni/patroni.yml list` on any db node. The Leader "
        "row is the primary; Lag in MB shows how far each replica is behind.",
        ("postgres", "patroni"),
    ),
    Doc(
        "pg-hot-standby",
        S,
        "chat",
        "2024-08-27",
        "hana",
        "slack/#platform",
        "#platform",
        "Turned hot_standby_feedback off on replica-2, the reporting replica. Long reports now get cancelled with "
        "'canceling statement due to conflict with recovery' instead of bloating the primary. Reporting folks "
        "know to retry.",
        ("postgres", "replication"),
    ),
    Doc(
        "pg-disk-alert",
        S,
        "note",
        "2024-06-03",
        "hana",
        "wiki/platform/postgres/alerts.md",
        "PgDiskFilling",
        "PgDiskFilling: data volume above 80%. First check for an inactive replication slot (pg_replication_slots "
        "where active is false): a forgotten slot keeps WAL forever and has filled a disk on us once.",
        ("postgres", "alerting"),
    ),
]

# --- INC-2340: pgbouncer connections ---------------------------------------------------------------------
DOCS += thread(
    "slack/#inc-2340-db-connections",
    S,
    "#inc-2340-db-connections",
    ("INC-2340", "pgbouncer"),
    [
        (
            "inc2340-open",
            "2024-07-02",
            "marcus",
            "payments-api is returning 5xx on 12% of requests since 14:20. Errors come from pgbouncer: 'no more "
            "connections allowed (max_client_conn)'.",
        ),
        (
            "inc2340-math",
            "2024-07-02",
            "hana",
            "pgbouncer max_client_conn is 800. The payments-api HPA went to 24 pods because of the marketing email spike, "
            "and 24 pods x max_pool_size 40 = 960.",
        ),
        (
            "inc2340-mitigate",
            "2024-07-02",
            "marcus",
            "Capping HPA maxReplicas at 18 in deploy/helm/values-prod.yaml and raising max_client_conn to 2000 as a hotfix.",
        ),
        (
            "inc2340-server",
            "2024-07-02",
            "hana",
            "Server side is healthy: default_pool_size is 60 per db/user pair, Postgres max_connections 400, nothing "
            "waiting for a server connection. It's purely the client limit.",
        ),
        (
            "inc2340-why40",
            "2024-07-02",
            "jonas",
            "Why is max_pool_size 40 anyway? Pods use 6-8 connections at peak. It was copied from the old monolith config.",
        ),
        (
            "inc2340-resolved",
            "2024-07-02",
            "marcus",
            "Resolved at 15:07, 47 minutes of elevated errors. Follow-ups go in the postmortem.",
        ),
        (
            "inc2340-proposal",
            "2024-07-03",
            "priya",
            "Proposal: max_pool_size 20 for payments-api, 10 for conveyor workers, and an alert on pgbouncer cl_waiting "
            "> 0 for 2 minutes.",
        ),
        (
            "inc2340-showpools",
            "2024-07-03",
            "hana",
            "Handy: `SHOW POOLS;` on the pgbouncer admin console (port 6432, database pgbouncer) gives cl_active and "
            "cl_waiting per pool. Saved it in the runbook.",
        ),
    ],
    kind="incident",
)
DOCS += [
    Doc(
        "max-pool-size",
        S,
        "note",
        "2024-07-05",
        "hana",
        "wiki/platform/postgres/connection-budget.md",
        "Connection budget",
        "payments-api runs with db.max_pool_size = 20 in prod (it was 40 until INC-2340) and min_pool_size = 2. Set "
        "through DB_MAX_POOL_SIZE in deploy/helm/values-prod.yaml. With maxReplicas 18 that's at most 360 client "
        "connections from payments-api.",
        ("pgbouncer", "config"),
    ),
    Doc(
        "conveyor-min-pool",
        S,
        "note",
        "2024-07-09",
        "leah",
        "notes/leah.md",
        "Idle connections from workers",
        "conveyor workers had min_pool_size 5, which kept five idle connections open per worker, times 60 workers. "
        "Set it to 0: an idle worker now holds nothing and opens connections as jobs arrive.",
        ("conveyor", "config"),
    ),
    Doc(
        "nw1342-ticket",
        S,
        "note",
        "2024-05-14",
        "hana",
        "jira/NW-1342",
        "NW-1342 Upgrade pgbouncer to 1.21",
        "NW-1342: pgbouncer 1.19 to 1.21 for protocol-level prepared statements in transaction mode "
        "(max_prepared_statements). Rolled out 14 May, one proxy at a time behind the NLB. Done.",
        ("pgbouncer",),
    ),
    Doc(
        "adr012",
        S,
        "decision",
        "2024-05-16",
        "hana",
        "wiki/platform/adr/adr-012-transaction-pooling.md",
        "ADR-012: pgbouncer stays in transaction mode",
        "pgbouncer runs in transaction pooling mode. Anything that depends on session state breaks: SET outside a "
        "transaction, advisory locks held across transactions, LISTEN/NOTIFY. Since 1.21, protocol-level named "
        "prepared statements work (max_prepared_statements = 200), so node-postgres and Prisma are fine; "
        "SQL-level PREPARE/EXECUTE still is not.",
        ("pgbouncer", "adr"),
    ),
    Doc(
        "pgbouncer-logrotate",
        S,
        "note",
        "2024-07-26",
        "marcus",
        "notes/marcus.md",
        "pgbouncer log rotation",
        "The pgbouncer logs were filling /var/log on the proxy hosts. Added a logrotate rule: daily, copytruncate, "
        "keep 7, compress. Also lowered log_connections to 0, it was logging every client connect.",
        ("pgbouncer", "logging"),
    ),
    Doc(
        "pgbouncer-alert",
        S,
        "note",
        "2024-07-10",
        "marcus",
        "wiki/platform/postgres/alerts.md",
        "PgbouncerClientsWaiting",
        "PgbouncerClientsWaiting: cl_waiting above zero for 2 minutes on any pool. Means clients are queued for a "
        "server connection; look at SHOW POOLS and at which app scaled up.",
        ("pgbouncer", "alerting"),
    ),
]

# --- conveyor, the job queue ---------------------------------------------------------------------------------
DOCS += [
    Doc(
        "conveyor-overview",
        S,
        "note",
        "2024-01-15",
        "leah",
        "services/conveyor/README.md",
        "conveyor",
        "conveyor is our job queue: a small TypeScript library on Redis Streams (ElastiCache, Redis 7) with consumer "
        "groups. Queues are declared in services/conveyor/queues/*.ts, each with maxAttempts, retryBackoffMs, "
        "retryBackoffMaxMs, visibilityTimeoutSec and concurrency. Unacked messages are reclaimed with XAUTOCLAIM.",
        ("conveyor",),
    ),
    Doc(
        "adr009",
        S,
        "decision",
        "2024-04-09",
        "leah",
        "wiki/platform/adr/adr-009-job-retries.md",
        "ADR-009: retries for conveyor jobs",
        "Jobs are retried with exponential backoff and full jitter: delay = random(0, min(retryBackoffMaxMs, "
        "retryBackoffMs x 2^(n-1))) for the n-th retry. Defaults: retryBackoffMs 500, retryBackoffMaxMs 60000, "
        "maxAttempts 8. After the last attempt the job moves to the queue's dead-letter stream. Queues that call "
        "third-party APIs set retryBackoffMs to 2000 or more so we don't pile onto a struggling vendor.",
        ("conveyor", "retries", "adr"),
    ),
    Doc(
        "webhook-delivery-queue",
        S,
        "note",
        "2024-04-23",
        "leah",
        "services/conveyor/queues/README.md",
        "webhook-delivery queue settings",
        "webhook-delivery (our outgoing webhooks to merchants) is the exception to ADR-009: retryBackoffMs 30000, "
        "retryBackoffMaxMs 3600000, maxAttempts 30, so we keep trying for up to a day. Merchants expect the same "
        "patience Stripe shows them.",
        ("conveyor", "webhooks", "config"),
    ),
    Doc(
        "conveyor-dlq",
        S,
        "note",
        "2024-04-12",
        "leah",
        "wiki/platform/conveyor/operations.md",
        "Parked jobs",
        "Anything that used up its maxAttempts is parked in <queue>:dlq. On-call looks at the DLQ panel once a day; "
        "`nwctl conveyor dlq replay payouts-daily --since 2h` re-enqueues with a fresh attempt counter. Parked "
        "messages older than 14 days are archived to S3 and dropped.",
        ("conveyor", "dlq"),
    ),
    Doc(
        "conveyor-keepalive",
        S,
        "note",
        "2024-11-06",
        "leah",
        "wiki/platform/conveyor/operations.md",
        "NAT and Redis",
        "Flows through the NAT gateway are forgotten after 350 s without traffic, so a Redis socket that sat unused "
        "all night is already dead when the worker next writes to it. conveyor's ioredis clients set keepAlive to "
        "30 s so the kernel sends probes and the NAT entry stays warm. If this regresses you'll see "
        "ECONNRESET on the first command after a quiet night.",
        ("conveyor", "redis", "ECONNRESET"),
    ),
    Doc(
        "conveyor-new-queue",
        S,
        "runbook",
        "2024-05-08",
        "leah",
        "wiki/platform/conveyor/new-queue.md",
        "Adding a queue",
        "Adding a conveyor queue: declare it in services/conveyor/queues/; pick maxAttempts and backoff per ADR-009; "
        "set requiresIdempotencyKey if the handler has side effects outside our own database; add it to the "
        "Grafana conveyor dashboard variable. The chart creates the DLQ alert from the queue list. Leah reviews.",
        ("conveyor", "process"),
    ),
    Doc(
        "conveyor-schedules",
        S,
        "note",
        "2024-02-05",
        "leah",
        "services/conveyor/README.md",
        "Scheduled jobs",
        "Cron-style schedules live in services/conveyor/schedules.yaml and are always UTC. A schedule that should "
        "follow a merchant's local time (dunning, statements) enqueues per merchant instead.",
        ("conveyor", "scheduling"),
    ),
    Doc(
        "conveyor-concurrency",
        S,
        "note",
        "2024-03-28",
        "leah",
        "notes/leah.md",
        "Worker concurrency",
        "Worker concurrency is per queue and per pod. payments-capture runs 4 per pod because each job waits on "
        "Stripe; email-send runs 32. Raising concurrency without raising the DB connection budget just moves the "
        "queue into pgbouncer.",
        ("conveyor",),
    ),
    Doc(
        "conveyor-visibility",
        S,
        "note",
        "2024-03-18",
        "leah",
        "notes/leah.md",
        "Choosing a visibility timeout",
        "Rule of thumb after INC-2291: visibilityTimeoutSec at least 3x the p99 of the handler, and a handler that "
        "might outlive it must be idempotent anyway. The timeout is a redelivery mechanism, not a lock.",
        ("conveyor", "INC-2291"),
    ),
    Doc(
        "conveyor-priority",
        S,
        "chat",
        "2024-08-06",
        "leah",
        "slack/#platform",
        "#platform",
        "No, conveyor has no priorities inside a queue. If something must jump ahead, give it its own queue with "
        "its own workers, like payouts-urgent.",
        ("conveyor",),
    ),
    Doc(
        "conveyor-local",
        S,
        "chat",
        "2024-02-20",
        "leah",
        "slack/#platform",
        "#platform",
        "Running conveyor tests locally and seeing ECONNREFUSED 127.0.0.1:6379? Redis isn't running: "
        "`docker compose up -d redis` from the repo root.",
        ("conveyor", "local-dev"),
    ),
]
DOCS += thread(
    "slack/#inc-2402-conveyor-backlog",
    S,
    "#inc-2402-conveyor-backlog",
    ("INC-2402", "conveyor"),
    [
        (
            "inc2402-open",
            "2024-11-05",
            "leah",
            "conveyor backlog at 180k messages on payouts-daily and email-send. Workers are alive but throughput is near "
            "zero. Logs are full of 'Error: read ECONNRESET' from ioredis.",
        ),
        (
            "inc2402-nat",
            "2024-11-05",
            "marcus",
            "The workers are idle for long stretches overnight. The NAT gateway drops flows idle for 350 seconds and "
            "ioredis doesn't notice until it writes to the dead socket.",
        ),
        (
            "inc2402-fix",
            "2024-11-05",
            "leah",
            "Setting keepAlive: 30000 on the ioredis client and enableOfflineQueue: false so commands fail fast instead "
            "of hanging on a dead connection.",
        ),
        (
            "inc2402-drain",
            "2024-11-05",
            "leah",
            "conveyor v1.9.2 with keepalives is rolled out. Backlog draining at about 4k/s, should be clear in 45 minutes.",
        ),
        (
            "inc2402-close",
            "2024-11-05",
            "sam",
            "INC-2402 resolved. No jobs lost; payouts ran about three hours late and Ruth's team let the affected "
            "merchants know.",
        ),
        (
            "inc2402-lesson",
            "2024-11-06",
            "marcus",
            "Same 350 s idle timeout hit the pgbouncer connections last year. Anything going through NAT needs TCP "
            "keepalives below 350 s.",
        ),
    ],
    kind="incident",
)

# --- Deploy pipeline ---------------------------------------------------------------------------------------
DOCS += [
    Doc(
        "econnrefused-hook",
        S,
        "note",
        "2024-05-28",
        "marcus",
        "wiki/platform/deploy-faq.md",
        "db-migrate hook refused",
        "The db-migrate pre-upgrade hook failed with `Error: connect ECONNREFUSED 172.20.14.9:6432` on the first "
        "try: the migration container starts before the istio-proxy sidecar is ready, so its first outbound "
        "connection to pgbouncer is refused. Fix: `holdApplicationUntilProxyStarts: true` in the proxy.istio.io/config "
        "annotation of deploy/helm/templates/db-migrate-job.yaml.",
        ("deploy", "istio", "ECONNREFUSED"),
    ),
    Doc(
        "hook-quitquitquit",
        S,
        "note",
        "2024-05-29",
        "marcus",
        "wiki/platform/deploy-faq.md",
        "Hook job never completes",
        "Second half of the sidecar story: the migration finished but the Job stayed Running because istio-proxy "
        "doesn't exit. migrate.sh now ends with `curl -fsS -XPOST localhost:15020/quitquitquit`, which stops the "
        "sidecar so the Job completes and helm carries on.",
        ("deploy", "istio"),
    ),
    Doc(
        "values-prod",
        S,
        "note",
        "2024-07-03",
        "marcus",
        "wiki/platform/deploy-faq.md",
        "Production chart values",
        "deploy/helm/values-prod.yaml holds the prod overrides per service: replicaCount, HPA min/max, resources and "
        "env. payments-api: HPA minReplicas 6, maxReplicas 18 (capped after INC-2340), CPU target 65%.",
        ("deploy", "helm", "config"),
    ),
    Doc(
        "values-staging",
        S,
        "note",
        "2024-03-12",
        "marcus",
        "wiki/platform/deploy-faq.md",
        "Staging chart values",
        "deploy/helm/values-staging.yaml: everything runs a single replica with HPA off, and payments-api points at "
        "the Stripe test-mode keys. Staging is torn down and rebuilt from the chart every Sunday night.",
        ("deploy", "helm", "staging"),
    ),
    Doc(
        "canary",
        S,
        "note",
        "2024-02-13",
        "marcus",
        "wiki/platform/deploy-faq.md",
        "Canary steps",
        "Argo Rollouts canary: 10%, 30%, 60%, 100% with 5-minute pauses. The analysis template watches the 5xx rate "
        "and p95 latency in Prometheus and aborts automatically if 5xx goes above 1%.",
        ("deploy", "canary"),
    ),
    Doc(
        "rollback",
        S,
        "note",
        "2024-02-13",
        "marcus",
        "wiki/platform/deploy-faq.md",
        "Rolling back",
        "`nwctl rollout undo <service>` wraps `kubectl argo rollouts undo`. Images stay in ECR for 30 days, so "
        "anything from the last month can be brought back without a rebuild.",
        ("deploy",),
    ),
    Doc(
        "image-tags",
        S,
        "note",
        "2024-01-22",
        "marcus",
        "wiki/platform/deploy-faq.md",
        "Image tags",
        "Images are tagged with the full git sha. `latest` is pushed for local convenience but the chart refuses "
        "it; a values file with tag: latest fails the lint step.",
        ("deploy",),
    ),
    Doc(
        "adr015",
        S,
        "decision",
        "2024-10-22",
        "sam",
        "wiki/platform/adr/adr-015-deploy-freezes.md",
        "ADR-015: deploy freezes",
        "No production deploys from Friday 15:00 CET until Monday 09:00, except hotfixes approved by the on-call "
        "lead. Black Friday freeze 2024: 25 November 00:00 to 2 December 23:59 UTC, same hotfix rule. Reason: "
        "weekend and peak-week incidents cost us the most and have the fewest people around.",
        ("deploy", "freeze", "adr"),
    ),
    Doc(
        "runner-pool",
        S,
        "note",
        "2024-06-19",
        "marcus",
        "notes/marcus.md",
        "CI runner pool",
        "The self-hosted GitHub Actions runner pool is 8 c6i.2xlarge instances in an autoscaling group. When the "
        "queue time goes above 10 minutes, scale the group; don't add runner labels, that splits the pool.",
        ("ci",),
    ),
    Doc(
        "ci-rerun",
        S,
        "chat",
        "2024-09-24",
        "marcus",
        "slack/#platform",
        "#platform",
        "Please stop hitting 're-run failed jobs' on deploy.yml until it goes green. If the integration suite fails "
        "twice, something's wrong; a retry just hides it and burns runner time.",
        ("ci",),
    ),
    Doc(
        "deploy-workflow",
        S,
        "note",
        "2024-01-22",
        "marcus",
        "wiki/platform/deploy-faq.md",
        "What deploy.yml does",
        ".github/workflows/deploy.yml: build and test, push the image to ECR, bump the tag in the chart, then Argo CD "
        "syncs. Production needs a manual approval in the GitHub environment; staging deploys on every merge.",
        ("deploy", "ci"),
    ),
    Doc(
        "node-20111",
        S,
        "decision",
        "2024-02-19",
        "marcus",
        "wiki/platform/adr/adr-008-node-version.md",
        "ADR-008: one Node version everywhere",
        "All Node services and the dashboard build use node 20.11.1, the February 2024 security release. It's "
        "pinned in .nvmrc, in the Dockerfile base image node:20.11.1-bookworm-slim and in engines in package.json. "
        "No odd-numbered majors: they never become LTS.",
        ("node", "adr"),
    ),
    Doc(
        "node-20110",
        S,
        "note",
        "2024-02-14",
        "marcus",
        "jira/NW-1401",
        "NW-1401 Bump base image to node 20.11.1",
        "NW-1401: services built on node:20.11.0 are missing the February security fixes. Renovate opened the bump "
        "to 20.11.1 for every repo; merge them this week.",
        ("node",),
    ),
    Doc(
        "node-18-eol",
        S,
        "note",
        "2024-10-15",
        "marcus",
        "jira/NW-1610",
        "NW-1610 Move reporting off Node 18",
        "NW-1610: the legacy reporting service still runs node 18.19.0. Node 18 reaches end of life on 30 April "
        "2025; it moves to the same pinned Node 20 image as everything else.",
        ("node",),
    ),
    Doc(
        "vite-migration-distractor",
        S,
        "chat",
        "2024-04-04",
        "marcus",
        "slack/#platform",
        "#platform",
        "Migration of the build cache to S3 is done; deploy.yml build times went from 11 to 6 minutes. Old EFS "
        "cache volume gets deleted Friday.",
        ("ci",),
    ),
    Doc(
        "staging-data-retention",
        S,
        "decision",
        "2024-08-01",
        "sam",
        "meetings/platform-weekly/2024-07-30.md",
        "Platform weekly 2024-07-30",
        "Agreed: staging databases are rebuilt from the anonymised snapshot every Sunday, and anything you put in "
        "staging is gone after a week. Long-lived test fixtures belong in the seed scripts.",
        ("staging",),
    ),
]

# --- On-call ---------------------------------------------------------------------------------------------------
DOCS += thread(
    "slack/#oncall",
    S,
    "#oncall",
    ("oncall",),
    [
        (
            "oc-handoff-23",
            "2024-06-03",
            "marcus",
            "Handoff Marcus -> Hana (week 23): quiet week. One PgReplicationLagHigh on replica-2 Tuesday, a reporting "
            "query was holding back replay, killed it. email-send DLQ has 12 jobs, all bounced addresses, safe to drop.",
        ),
        (
            "oc-handoff-time",
            "2024-01-08",
            "sam",
            "Reminder: handoff is Monday 10:00 CET in the #oncall huddle. The outgoing person posts the written summary "
            "here first.",
        ),
        (
            "oc-low-urgency",
            "2024-02-26",
            "marcus",
            "For things that can wait until morning: post here and tag @platform-oncall. Only use `/pd trigger` when it "
            "really can't wait until business hours.",
        ),
        (
            "oc-override",
            "2024-03-11",
            "sam",
            "If you need cover for a few hours, create an override in PagerDuty. Asking in Slack doesn't move the pager.",
        ),
        (
            "oc-handoff-27",
            "2024-07-01",
            "hana",
            "Handoff Hana -> Leah (week 27): INC-2340 on Tuesday (pgbouncer client limit, postmortem in progress). HPA for "
            "payments-api is capped at 18 until the pool change lands; don't raise it.",
        ),
        (
            "oc-handoff-46",
            "2024-11-11",
            "leah",
            "Handoff Leah -> Marcus (week 46): INC-2402 last Tuesday, conveyor backlog from ECONNRESET. Keepalive fix is out. "
            "Watch the conveyor lag panel at night for the first few days.",
        ),
        (
            "oc-dlq-check",
            "2024-04-15",
            "leah",
            "New on the on-call checklist: look at the DLQ panel once a day. Anything with more than 50 parked jobs gets "
            "a ticket, even if it looks harmless.",
        ),
        (
            "oc-laptop",
            "2024-05-13",
            "sam",
            "On-call means laptop within reach and 15-minute response for high urgency pages. If that won't work for a "
            "day, swap or override; nobody will mind.",
        ),
        (
            "oc-handoff-31",
            "2024-07-29",
            "marcus",
            "Handoff Marcus -> Hana (week 31): two pages, both disk alerts on the logging nodes, not the databases. "
            "pgbouncer logs were the culprit; logrotate is in place now.",
        ),
        (
            "oc-pay",
            "2024-01-29",
            "sam",
            "On-call allowance is paid per week on rota plus per night page. Log night pages in the sheet linked in the "
            "handbook; HR pulls it on the 25th.",
        ),
        (
            "oc-statuspage",
            "2024-03-14",
            "marcus",
            "Whoever is incident commander updates the status page, not the engineer doing the fixing. First update within "
            "15 minutes of declaring, then every 30.",
        ),
        (
            "oc-handoff-12",
            "2024-03-18",
            "jonas",
            "Handoff Jonas -> Marcus (week 12): INC-2291 all week (duplicate captures). Fix v2.14.3 is out, capture.async "
            "returns this week. Refund backlog done.",
        ),
    ],
)
DOCS += [
    Doc(
        "oc-escalation",
        S,
        "runbook",
        "2024-02-26",
        "sam",
        "wiki/platform/oncall/escalation.md",
        "When you need help",
        "If you've been woken up and can't make progress within 20 minutes, add the secondary as a responder in "
        "PagerDuty. Next come the service owners (payments: Priya, database: Hana, conveyor: Leah, dashboard: "
        "Tomás). Sam is the last step and would rather be woken than left out.",
        ("oncall", "escalation"),
    ),
    Doc(
        "oc-escalation-policy",
        S,
        "note",
        "2024-01-10",
        "sam",
        "wiki/platform/oncall/escalation.md",
        "Escalation policy",
        "PagerDuty escalation for platform-oncall: primary, then secondary after 10 minutes unacknowledged, then "
        "Sam after 20.",
        ("oncall", "escalation"),
    ),
    Doc(
        "slo-payments",
        S,
        "note",
        "2024-01-12",
        "sam",
        "wiki/platform/slos.md",
        "payments-api SLO",
        "payments-api availability SLO is 99.95% per month, which is 21.6 minutes of error budget. Below 25% budget "
        "left, feature deploys to payments-api stop until the month resets.",
        ("slo",),
    ),
    Doc(
        "oncall-rotation-distractor",
        S,
        "chat",
        "2024-09-02",
        "sam",
        "slack/#platform",
        "#platform",
        "Rotation change from October: the on-call rotation goes from weekly to two-week blocks with a shadow week "
        "first for new people. Kofi and Inês join the rotation in November.",
        ("oncall",),
    ),
]

# --- Security -----------------------------------------------------------------------------------------------------
DOCS += [
    Doc(
        "cve-xz",
        S,
        "note",
        "2024-03-30",
        "kofi",
        "wiki/security/advisories.md",
        "CVE-2024-3094 (xz)",
        "CVE-2024-3094, the xz backdoor: checked every base image for xz-utils 5.6.0 or 5.6.1. bookworm-slim ships "
        "5.4.1, so we're not affected. Recorded for the audit trail, nothing to do.",
        ("security", "cve"),
    ),
    Doc(
        "cve-runc",
        S,
        "note",
        "2024-02-05",
        "kofi",
        "wiki/security/advisories.md",
        "CVE-2024-21626 (runc)",
        "CVE-2024-21626 ('Leaky Vessels' container escape in runc): EKS node groups rolled to AMIs with runc "
        "1.1.12 on 5 February. Marcus did the rollout, one node group at a time.",
        ("security", "cve"),
    ),
    Doc(
        "cve-rapid-reset",
        S,
        "note",
        "2024-01-09",
        "kofi",
        "wiki/security/advisories.md",
        "CVE-2023-44487 (HTTP/2 rapid reset)",
        "CVE-2023-44487, HTTP/2 rapid reset: the ALB absorbs it for public traffic; the mesh got istio 1.19.3 with "
        "the patched envoy. Closing this out for the year-end review.",
        ("security", "cve"),
    ),
    Doc(
        "cve-path-to-regexp",
        S,
        "note",
        "2024-09-16",
        "kofi",
        "wiki/security/advisories.md",
        "CVE-2024-45296 (path-to-regexp)",
        "CVE-2024-45296: path-to-regexp before 0.1.10 backtracks badly on routes with two parameters in one segment "
        "(like /:from-:to). payments-api gets it through express; fixed by moving to express 4.21.0 (v2.15.4).",
        ("security", "cve"),
    ),
    Doc(
        "cve-body-parser",
        S,
        "note",
        "2024-09-16",
        "kofi",
        "wiki/security/advisories.md",
        "CVE-2024-45590 (body-parser)",
        "CVE-2024-45590: body-parser before 1.20.3 can be made to use a lot of CPU when urlencoded parsing is "
        "enabled. We only enable it on the legacy form endpoint. Same express 4.21.0 bump fixes it.",
        ("security", "cve"),
    ),
    Doc(
        "cve-express-redirect",
        S,
        "note",
        "2024-04-02",
        "kofi",
        "wiki/security/advisories.md",
        "CVE-2024-29041 (express)",
        "CVE-2024-29041: open redirect in express res.location/res.redirect with malformed URLs, fixed in 4.19.2. "
        "Our redirects only use relative paths we build ourselves, but bump anyway.",
        ("security", "cve"),
    ),
    Doc(
        "renovate-policy",
        S,
        "decision",
        "2024-03-05",
        "kofi",
        "wiki/security/dependencies.md",
        "Dependency update policy",
        "Renovate opens PRs weekly, grouped per repo. Security updates skip the schedule and get a 7-day SLA for high "
        "and critical; moderate ones ride the weekly batch. Dev-only dependencies count too if they run in CI.",
        ("security", "dependencies"),
    ),
    Doc(
        "vault-secrets",
        S,
        "note",
        "2024-02-08",
        "kofi",
        "wiki/security/secrets.md",
        "Where secrets live",
        "All runtime secrets live in Vault under secret/<service>/ and are injected as env vars at pod start by the "
        "agent injector. Changing a value in Vault does nothing to running pods until they restart.",
        ("security", "secrets"),
    ),
    Doc(
        "grafana-secret",
        S,
        "chat",
        "2024-06-27",
        "marcus",
        "slack/#platform",
        "#platform",
        "Rotated the Grafana admin password and the k8s secret grafana-admin in the monitoring namespace. New one is "
        "in 1Password under 'Grafana prod admin'.",
        ("secrets", "monitoring"),
    ),
]

# --- Memories saved by the assistant -----------------------------------------------------------------------------
DOCS += [
    Doc(
        "mem-terraform",
        S,
        "chat",
        "2024-03-06",
        "agent",
        "memory/assistant-platform.jsonl",
        "Saved memory",
        "Marcus wants terraform plans pasted as a PR comment, not as a screenshot, so the reviewer can search them.",
        ("process",),
    ),
    Doc(
        "mem-hana-tz",
        S,
        "chat",
        "2024-04-22",
        "agent",
        "memory/assistant-platform.jsonl",
        "Saved memory",
        "Hana works from Lisbon and keeps Wednesday afternoons free of meetings for database maintenance work.",
        ("people",),
    ),
    Doc(
        "mem-leah-queue-review",
        S,
        "chat",
        "2024-05-09",
        "agent",
        "memory/assistant-platform.jsonl",
        "Saved memory",
        "Leah reviews every new conveyor queue definition; she asks for the expected jobs per minute in the PR "
        "description.",
        ("conveyor", "process"),
    ),
    Doc(
        "mem-bastion",
        S,
        "chat",
        "2024-06-14",
        "agent",
        "memory/assistant-platform.jsonl",
        "Saved memory",
        "The user had trouble with the bastion: `nwctl` needs a fresh SSO login (`nwctl login`) every 12 hours, "
        "otherwise the db connect command hangs without an error.",
        ("access",),
    ),
    Doc(
        "mem-grafana-folders",
        S,
        "chat",
        "2024-08-19",
        "agent",
        "memory/assistant-platform.jsonl",
        "Saved memory",
        "Dashboards in the 'Platform / Core' Grafana folder are provisioned from git; edits in the UI are lost on "
        "the next deploy.",
        ("monitoring",),
    ),
    Doc(
        "mem-sam-incidents",
        S,
        "chat",
        "2024-03-15",
        "agent",
        "memory/assistant-platform.jsonl",
        "Saved memory",
        "Sam asked that every incident channel starts with a one-line impact statement and the INC number in the "
        "channel name.",
        ("incident", "process"),
    ),
]

COPIES: list[Copy] = [
    Copy(
        "econnrefused-slack",
        "econnrefused-hook",
        "slack/#platform",
        "2024-05-28",
        kind="chat",
        title="#platform",
        prefix="Heads up, if your deploy hangs on the migration hook: ",
        edits=((" on the first try", ""),),
    ),
    Copy(
        "econnrefused-notes",
        "econnrefused-hook",
        "notes/marcus.md",
        "2024-06-02",
        kind="note",
        title="Sidecar startup race",
        suffix="\n\n(copied from the deploy FAQ)",
    ),
    Copy(
        "max-pool-size-slack",
        "max-pool-size",
        "slack/#platform",
        "2024-07-05",
        author="hana",
        kind="chat",
        title="#platform",
        prefix="Pool change is live. ",
    ),
    Copy(
        "pg-readonly-oncall",
        "pg-readonly",
        "wiki/platform/oncall/handbook-snippets.md",
        "2024-05-20",
        title="Getting read access to prod data",
        edits=(("Need to look at prod data? ", ""),),
    ),
    Copy(
        "pg-readonly-slack",
        "pg-readonly",
        "slack/#platform-access",
        "2024-09-09",
        author="hana",
        kind="chat",
        title="#platform-access",
        suffix=" Thanks!",
    ),
    Copy(
        "adr009-slack",
        "adr009",
        "slack/#platform",
        "2024-04-09",
        kind="chat",
        title="#platform",
        prefix="ADR-009 merged. Summary: ",
    ),
    Copy(
        "adr015-announce",
        "adr015",
        "slack/#eng-announce",
        "2024-10-22",
        kind="chat",
        title="#eng-announce",
        prefix="Deploy freeze policy, please read: ",
    ),
    Copy(
        "adr015-weekly",
        "adr015",
        "meetings/platform-weekly/2024-10-22.md",
        "2024-10-22",
        kind="meeting",
        title="Platform weekly 2024-10-22",
        edits=(("2 December 23:59 UTC", "2 Dec 23:59 UTC"),),
    ),
    Copy(
        "node-20111-slack",
        "node-20111",
        "slack/#platform",
        "2024-02-19",
        kind="chat",
        title="#platform",
        suffix="\n\nRenovate PRs are already open.",
    ),
    Copy(
        "conveyor-keepalive-slack",
        "conveyor-keepalive",
        "slack/#platform",
        "2024-11-06",
        kind="chat",
        title="#platform",
        prefix="Writing this down so we don't relearn it: ",
    ),
    Copy(
        "oc-low-urgency-handbook",
        "oc-low-urgency",
        "wiki/platform/oncall/handbook-snippets.md",
        "2024-03-01",
        kind="note",
        title="Paging etiquette",
        edits=(("post here", "post in #oncall"),),
    ),
]

# --- More notes: everyday knowledge and look-alikes ------------------------------------------------------------
DOCS += [
    Doc(
        "log-retention",
        S,
        "note",
        "2024-04-30",
        "marcus",
        "wiki/platform/observability.md",
        "How long we keep telemetry",
        "Logs in Loki are kept 30 days. Prometheus keeps 15 days locally and Thanos keeps downsampled metrics for 13 "
        "months. Traces are sampled at 5% and kept 7 days.",
        ("observability",),
    ),
    Doc(
        "terraform-state",
        S,
        "note",
        "2024-01-18",
        "marcus",
        "wiki/platform/infra.md",
        "Terraform",
        "Terraform state lives in the nw-tf-state bucket with DynamoDB locking. Nobody runs apply against prod from a "
        "laptop: Atlantis plans on the PR and applies after approval.",
        ("terraform",),
    ),
    Doc(
        "eks-upgrade",
        S,
        "note",
        "2024-08-20",
        "marcus",
        "notes/marcus.md",
        "EKS 1.30",
        "EKS control plane 1.29 -> 1.30 done. Node groups followed one AZ at a time; PodDisruptionBudgets kept "
        "payments-api at 6 or more ready pods the whole way.",
        ("kubernetes",),
    ),
    Doc(
        "redis-setup",
        S,
        "note",
        "2024-01-16",
        "leah",
        "services/conveyor/README.md",
        "Redis for conveyor",
        "conveyor's Redis is ElastiCache 7.1, cluster mode off, one replica in another AZ. A failover takes about 30 "
        "seconds; workers reconnect on their own and unacked messages get claimed again.",
        ("redis", "conveyor"),
    ),
    Doc(
        "game-day",
        S,
        "note",
        "2024-09-13",
        "hana",
        "notes/hana.md",
        "Game day 2024-09-12",
        "Game day: stopped the pg-main primary at 14:00. Patroni promoted replica-1 in 24 s; payments-api errored "
        "for 9 s. Finding: the console backend had the old primary's address hardcoded in one report job. Fixed "
        "to use pg-main-rw.",
        ("postgres", "game-day"),
    ),
    Doc(
        "nat-costs",
        S,
        "note",
        "2024-10-09",
        "marcus",
        "notes/marcus.md",
        "AWS bill",
        "NAT gateway data processing was 18% of the September AWS bill, mostly image pulls from ECR. Added a VPC "
        "endpoint for ECR and S3; should cut that by two thirds.",
        ("cost",),
    ),
    Doc(
        "severity-levels",
        S,
        "note",
        "2024-01-10",
        "sam",
        "wiki/platform/oncall/severity.md",
        "Severity levels",
        "SEV-1: money or data at risk, or a full outage. SEV-2: partial degradation for many customers. SEV-3: "
        "degraded for a few, or internal tools only. When unsure, pick the higher one; downgrading is free.",
        ("incident",),
    ),
    Doc(
        "dns-ttl",
        S,
        "note",
        "2024-05-06",
        "hana",
        "wiki/platform/postgres/overview.md",
        "pg-main-rw",
        "pg-main-rw is a DNS name with a 5 second TTL that Patroni's callback points at the current leader. Clients "
        "must not cache it longer; the JVM-based reporting tool did and needed networkaddress.cache.ttl=5.",
        ("postgres", "dns"),
    ),
    Doc(
        "platform-weekly-0716",
        S,
        "meeting",
        "2024-07-16",
        "sam",
        "meetings/platform-weekly/2024-07-16.md",
        "Platform weekly 2024-07-16",
        "Connection budget check is live in platform-infra CI. It already caught one PR that raised conveyor's "
        "maxReplicas without touching its pool size.",
        ("pgbouncer", "meeting"),
    ),
    Doc(
        "platform-weekly-0716-b",
        S,
        "meeting",
        "2024-07-16",
        "sam",
        "meetings/platform-weekly/2024-07-16.md",
        "Platform weekly 2024-07-16",
        "Kofi wants all CI tokens to be short-lived OIDC credentials by end of Q3. Marcus to move deploy.yml to the "
        "GitHub OIDC role first.",
        ("security", "meeting"),
    ),
    Doc(
        "mem-ci-flaky",
        S,
        "chat",
        "2024-10-02",
        "agent",
        "memory/assistant-platform.jsonl",
        "Saved memory",
        "The user prefers to be told straight away when a CI failure looks like a flaky test rather than a real "
        "regression, with the link to the previous run that passed.",
        ("ci",),
    ),
]
DOCS += [
    Doc(
        "oc-handoff-template",
        S,
        "runbook",
        "2024-06-10",
        "sam",
        "wiki/platform/oncall/handbook-snippets.md",
        "Handoff template",
        "Handoff template, paste into #oncall before Monday 10:00: 1) incidents and pages with links, 2) anything "
        "still degraded or being watched (capped autoscaler, paused queue, noisy alert), 3) DLQ state per queue, "
        "4) promises made to other teams or support. Keep it short; link instead of retelling.",
        ("oncall", "handoff"),
    ),
]
