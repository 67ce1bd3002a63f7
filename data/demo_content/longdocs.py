"""Long documents (postmortems, runbooks, design docs) that a chunker splits into several chunks."""

from __future__ import annotations

from .model import Doc

PM_INC2291 = """# Postmortem: INC-2291, duplicate card captures

**Status:** final. **Date of incident:** 2024-03-13 16:40 UTC to 2024-03-14 11:52 UTC. **Severity:** SEV-1.
**Authors:** Priya Raman, Jonas Weber. **Reviewed:** payments sync, 19 March 2024.

## Summary

For a little over nineteen hours, 212 orders were captured twice. The second capture happened 30 to 45
seconds after the first and moved real money: €18,430.12 in total. Customers noticed before we did; support
received the first ticket at 08:58 UTC on the 14th and the incident was declared at 09:20.

The asynchronous capture path, shipped dark in payments-api v2.13.0 behind the flag `capture.async`, was
switched on for all merchants at 16:40 UTC on the 13th. Under the slow Stripe responses of that evening and
the next morning, conveyor redelivered capture jobs whose first attempt was still in flight, and each
delivery used a new idempotency key. Stripe treated each delivery as a new request.

## Impact

- 212 PaymentIntents captured twice; no PaymentIntent captured three times.
- 40+ support tickets in the first hour, 190 in total; 3 chargebacks opened before our refunds arrived.
- All duplicates refunded by 15 March 18:00 UTC. Refunds take 5-10 business days to reach cardholders.
- No ledger corruption: the ledger recorded both captures correctly, which is how the blast radius query
  could be written in twenty minutes.

## Timeline (UTC)

- **27 Feb** - v2.13.0 released. Async capture path present, flag off.
- **13 Mar 16:40** - `capture.async` enabled at 100%, after two weeks dark in production and green staging tests.
- **13 Mar 19:10** - first duplicate capture (found later from Stripe events).
- **14 Mar 08:58** - first customer ticket; 09:20 incident declared, Jonas paged.
- **14 Mar 09:41** - duplicates confirmed in Stripe; 10:05 cause identified (random key per delivery).
- **14 Mar 11:52** - `capture.async` switched off. No new duplicates afterwards.
- **15 Mar** - refunds for all 212 duplicates issued, rate limited to 20 per second.
- **16 Mar 10:05** - v2.14.3 (NW-1432) in production.
- **21 Mar** - flag back on at 100% after a 25% day.

## What happened

### The async capture path

Capturing a PaymentIntent used to happen on the checkout request: the customer waited for Stripe. v2.13.0
added a second path: the API records the intent to capture and enqueues a job on the conveyor queue
`payments-capture`; a worker performs the capture and updates the order. Checkout got three times faster.

### Redelivery

conveyor gives a message to a consumer and, if it isn't acknowledged within the queue's visibility timeout,
hands it to another consumer. `payments-capture` had the library default of 30 seconds. Stripe capture
latency is normally under 2 seconds, but on the evening of the 13th its p99 went above 40 seconds for about
two hours, and again on the morning of the 14th. Every capture slower than 30 seconds was delivered twice.

### The key

The worker built its idempotency key with `randomUUID()` at the start of each delivery. The first delivery
eventually succeeded; the second, with a different key, was a brand-new capture request as far as Stripe was
concerned. Had the key been stable across deliveries, Stripe would have returned the first result to the
second worker and nothing would have happened.

## Why we didn't catch it earlier

- Staging Stripe test mode never took longer than a few seconds, so redelivery never happened there.
- The flag went from 0% to 100% in one step. A gradual rollout would have limited the damage, though the
  first duplicate only appeared two and a half hours in.
- Nothing alerted on "more than one capture per PaymentIntent". The ledger knew; no one asked it.

## What went well

- The ledger's double entries made the blast radius exact within twenty minutes.
- Turning the flag off was a one-minute change with no deploy.
- Support had a macro out before the first hour was over and set honest expectations about refund timing.

## Action items

| # | Action | Owner | Status |
|---|--------|-------|--------|
| 1 | Derive the capture idempotency key from the PaymentIntent id and carry it in the job payload (NW-1432) | Priya | done, v2.14.3 |
| 2 | Raise payments-capture visibility timeout to 120 s; document the 3x p99 rule | Leah | done |
| 3 | conveyor: `requiresIdempotencyKey` option that rejects payloads without a key | Leah | done |
| 4 | Alarm on more than one successful capture per PaymentIntent in 10 minutes | Jonas | done |
| 5 | ADR on how idempotency keys are built for every money-moving call (ADR-007) | Priya | done |
| 6 | Flags that touch money go 1% / 25% / 100% with a day in between | Sam | done |
| 7 | Stripe latency chaos test in staging (inject 45 s delays) | Jonas | open |

## Lessons

A job queue promises at-least-once delivery, and the visibility timeout is not a lock. Anything a job does
outside our own database must be safe to do twice, and the key that makes it safe has to be decided before
the job is enqueued, not inside it.
"""

RB_WEBHOOKS = """# Runbook: Stripe webhooks

Owner: payments (Priya Raman, backup Jonas Weber). Last reviewed 2024-08-14.

## How webhooks reach us

Stripe sends events for our prod endpoint to `https://api.northwind.example/webhooks/stripe`. The handler
lives in `services/payments/src/webhooks/stripe.ts`. It verifies the signature, stores the event id in
`webhook_dedupe` (so replays are no-ops), enqueues follow-up work on conveyor and answers 200 within a few
milliseconds. Anything slow happens in the queue, never in the handler: Stripe times out deliveries after
a few seconds and retries them.

Stripe retries failed deliveries with exponential backoff for up to three days in live mode. A short outage
of the handler therefore loses nothing; it produces a backlog that drains by itself once we answer 200 again.

## Dashboards and alerts

- **WebhookFailuresHigh**: more than 5% of deliveries answered with a non-2xx status for 10 minutes.
- **WebhookLagHigh**: the oldest unprocessed event in `webhook_dedupe` is older than 15 minutes.
- Grafana: *Payments / Webhooks* shows deliveries by status code and event type.

## Signature failures (400, "No signatures found matching the expected signature")

Almost always one of three things:

1. **The secret changed and the pods didn't.** Secrets are injected from Vault as env vars when a pod starts;
   changing Vault does nothing to running pods. This is what happened in INC-2219.
2. **The raw body was parsed.** `constructEvent` needs the exact bytes Stripe sent. If a route is mounted
   behind `express.json()`, verification fails for every event on that route.
3. **Clock skew.** Signatures older than five minutes are rejected. Check NTP on the node if failures are
   intermittent and correlate with one node.

## Rotating the signing secret

We rotate `STRIPE_WEBHOOK_SECRET` every quarter and whenever someone who had access leaves. Since
NW-1367 (v2.12.4) the handler accepts a signature made with either `STRIPE_WEBHOOK_SECRET` or
`STRIPE_WEBHOOK_SECRET_OLD`, so a rotation needs no synchronised restart:

1. In the Stripe dashboard, open the prod endpoint and choose **Roll secret**. Pick an expiry of **24 hours**
   for the old secret, never "now".
2. In Vault, copy the current value of `secret/payments/stripe-webhook` field `current` into field `old`, then
   put the new secret into `current`.
3. Roll payments-api: `nwctl rollout restart payments-api`. New pods read `STRIPE_WEBHOOK_SECRET` (new) and
   `STRIPE_WEBHOOK_SECRET_OLD` (old).
4. Watch the log field `webhook.secret_matched`: it should move from `old` to `current` within minutes as
   Stripe starts signing with the new secret.
5. After 24 hours, delete the `old` field in Vault and roll again. The handler ignores an empty
   `STRIPE_WEBHOOK_SECRET_OLD`.

Do not rotate on a Friday or during a deploy freeze unless the secret has leaked.

## Replaying events

If we acknowledged events we then failed to process (a bug in a follow-up job, say), replay them from our
side rather than asking Stripe:

```
nwctl payments webhooks replay --type payment_intent.succeeded --since 2024-08-01T00:00Z --dry-run
```

Remove `--dry-run` when the count looks right. Replays go through the same dedupe table with a replay flag,
so handlers that are idempotent (all of them should be) do nothing twice.

## Event types we depend on

- `payment_intent.succeeded`, `payment_intent.payment_failed`: order state and decline codes.
- `charge.refunded`, `charge.dispute.created`: refunds and disputes; disputes page the payments on-call during
  business hours only.
- `payout.paid`, `payout.failed`: merchant payout status shown in the console.
- `account.updated`: Connect onboarding status.

Anything else is stored and ignored. Adding an event type means adding it to the endpoint in the Stripe
dashboard as well as to the handler, or it never arrives.

## Escalation

If deliveries fail and none of the above explains it, check Stripe's status page, then open a priority case
from the Stripe dashboard. Page Priya for anything that has lasted more than 30 minutes.
"""

RB_FAILOVER = """# Runbook: Postgres failover and replication lag

Owner: Hana Kobayashi. Applies to pg-main (Postgres 16.2, Patroni 3.2, three nodes across eu-west-1a/1b/1c)
and the pgbouncer proxies in front of it. Last exercised in the game day of 2024-09-12.

## Before you touch anything

- Open an incident channel if users are affected. Failover itself is routine; doing it silently is not.
- Look at the cluster first: `patronictl -c /etc/patroni/patroni.yml list`. Note which node is Leader, the
  state of the replicas and the **Lag in MB** column.
- Patroni fails over automatically when the leader loses its lock in etcd for longer than `ttl` (30 s). Most
  of the time you are here after the fact, to check that it went well.

## Planned switchover

Use this for maintenance on the primary's host, kernel upgrades, instance resizes.

1. Pick the replica with the lowest lag as the candidate.
2. Pause conveyor's heavy writers (payouts, ledger batch jobs): `nwctl conveyor pause payouts-daily ledger-batch`.
3. Run `patronictl -c /etc/patroni/patroni.yml switchover --leader <current> --candidate <replica> --scheduled now`.
4. Patroni demotes the old leader, promotes the candidate and repoints the other replica. pgbouncer follows
   through the `pg-main-rw` DNS name that Patroni's callback updates; expect 5-10 seconds of refused writes.
5. Resume conveyor: `nwctl conveyor resume payouts-daily ledger-batch`.
6. Check `SHOW POOLS;` on each pgbouncer admin console: no `cl_waiting`, servers connected to the new leader.

## Unplanned failover

When the primary dies, Patroni promotes the healthiest replica by itself. Your job:

1. Confirm a new Leader in `patronictl list` and that it accepts writes (`SELECT pg_is_in_recovery();` returns
   false on it).
2. Check the application error rate. Transactions that were in flight on the old primary failed; ledger-writer
   retries them, and payments-api returns 503 for about ten seconds.
3. Do **not** restart the old primary by hand. Patroni rejoins it as a replica with `pg_rewind` when it comes
   back. If `pg_rewind` fails, reinitialise it: `patronictl reinit pg-main <node>`.
4. If the cluster has no Leader after a minute, etcd is the likely problem, not Postgres. Check the etcd
   members before forcing anything. Forcing a failover with `--force` while the old primary may still be up
   risks a split brain; call Hana first.

## Replication lag

### Spotting it early

The alert **PgReplicationLagHigh** fires when replay lag on any replica stays above 30 seconds for five
minutes. Before it fires you can usually see: `Lag in MB` climbing in `patronictl list`, `replay_lag` growing in
`pg_stat_replication` on the primary, and dashboards that read from replicas showing stale numbers (merchant
balances in the console are the usual first complaint).

### Causes, most common first

1. **A long query on the replica.** With `hot_standby_feedback` off, replay waits up to
   `max_standby_streaming_delay` (30 s) for conflicting queries and then cancels them. On replica-2 (reporting)
   we allow this; look for long-running reports in `pg_stat_activity`.
2. **A large write burst on the primary.** Batch deletes and big backfills produce WAL faster than a replica can
   apply it. Backfills must run in batches of at most 10,000 rows with a pause between batches.
3. **Disk or network saturation on the replica.** Compare IOPS with the primary in the *Postgres / Nodes*
   dashboard.

### What to do

- If one report is the cause, cancel it: `SELECT pg_cancel_backend(<pid>);` on the replica.
- If a backfill is the cause, pause it; the replica catches up on its own.
- While a replica is more than 60 seconds behind, take it out of the read pool: set `nofailover` and
  `noloadbalance` tags in its Patroni config and reload, so pgbouncer's read pool and failover both skip it.

## After any failover

- Post in #oncall: old leader, new leader, duration of refused writes.
- Check backups: pgBackRest must run against the new primary; `pgbackrest --stanza=main check`.
- Run `vacuumdb --all --analyze-only` only if the new primary was rebuilt from a backup; a streaming replica
  already has statistics.
- File a ticket for the root cause of an unplanned failover, even if it healed itself.

## Reference

| Setting | Value | Why |
|---|---|---|
| Patroni `ttl` | 30 s | leader lock lifetime |
| `max_standby_streaming_delay` | 30 s | how long replay waits for queries |
| `synchronous_mode` | off | one slow AZ must not stall writes |
| pgbouncer `server_check_delay` | 10 s | how soon dead servers are noticed |
"""

PM_INC2340 = """# Postmortem: INC-2340, pgbouncer refused client connections

**Date:** 2024-07-02, 14:20-15:07 UTC. **Severity:** SEV-2. **Author:** Hana Kobayashi. **Reviewed:** platform
weekly, 9 July.

## Summary

For 47 minutes about 12% of payments-api requests failed with 5xx. pgbouncer refused new client connections
with `no more connections allowed (max_client_conn)`. The database itself was never under pressure.

A marketing email brought a traffic spike; the payments-api autoscaler went from 8 to 24 pods. Each pod opens
up to `max_pool_size` connections to pgbouncer, which was 40, so payments-api alone could open 960 client
connections against a pgbouncer limit of 800. Conveyor workers and the console backend hold about 150 more.

## Timeline (UTC)

- 14:02 - campaign email sent to 1.2 million recipients.
- 14:11 - payments-api HPA scales from 8 to 16 pods, 14:18 to 24.
- 14:20 - first `max_client_conn` errors; error rate 12% within two minutes.
- 14:26 - Marcus paged by the 5xx alert, opens #inc-2340-db-connections.
- 14:38 - Hana finds the arithmetic: 24 x 40 > 800.
- 14:49 - hotfix: HPA `maxReplicas` 18 in `deploy/helm/values-prod.yaml`, pgbouncer `max_client_conn` 2000.
- 15:07 - errors back to baseline; incident resolved.

## Why the numbers were what they were

`max_pool_size: 40` came from the monolith's config, where one process served everything and needed a large
pool. payments-api pods use 6-8 connections at peak. Nobody had compared the sum of all client pools with
pgbouncer's `max_client_conn` since the service was split out, and the autoscaler's maximum had been raised
to 24 in May without anyone looking at connections.

Server-side limits were fine: `default_pool_size` is 60 per database/user pair and Postgres allows 400
connections. Transaction pooling means 960 client connections need only a few dozen server connections.

## What we changed

### Client pools

- payments-api `max_pool_size` 40 -> 20 and `min_pool_size` 2.
- conveyor workers `max_pool_size` 10 and `min_pool_size` 0, so idle workers hold nothing.
- Console backend unchanged at 10.

### pgbouncer

- `max_client_conn` 800 -> 2000 on all three proxies (it costs a little memory per connection, nothing else).
- `default_pool_size` stays 60; `reserve_pool_size` 10 with `reserve_pool_timeout` 3 s.

### Guardrails

- A CI check in platform-infra computes, for every service, `maxReplicas x max_pool_size` and fails if the sum
  over all services exceeds 80% of `max_client_conn`.
- Alert **PgbouncerClientsWaiting** (`cl_waiting` > 0 for 2 minutes) and an alert when client connections pass
  70% of `max_client_conn`.

## Action items

| # | Action | Owner | Status |
|---|--------|-------|--------|
| 1 | Lower payments-api `max_pool_size` to 20 | Priya | done 5 July |
| 2 | Raise pgbouncer `max_client_conn` to 2000 permanently | Hana | done |
| 3 | Connection budget check in CI | Marcus | done |
| 4 | Alerts on `cl_waiting` and client connection ratio | Marcus | done |
| 5 | Revisit the HPA cap of 18 after the Black Friday load test | Marcus | open |
| 6 | Marketing to announce large campaigns in #eng-announce a day ahead | Sam | agreed |

## Lessons

Pool sizes are a budget shared by every replica of every service. When an autoscaler's maximum changes, the
connection budget has to be checked in the same change, and the easiest way to make sure is to let CI do it.
"""

DD_CONVEYOR = """# Design: retries and redelivery in conveyor

Author: Leah Brennan. Status: accepted as ADR-009 (2024-04-09). Reviewers: Priya Raman, Marcus Oyelaran.

## Context

conveyor is our job queue on Redis Streams. Until April 2024 each queue chose its own retry behaviour, and
most chose none: a failing handler was retried immediately by the next consumer until `maxAttempts`, with the
result that a vendor outage turned into a tight loop of requests against the vendor. INC-2291 added a second
concern: the difference between a retry (the handler failed) and a redelivery (the handler took too long).

## Two ways a job runs again

**Retry.** The handler threw or returned a retryable error. conveyor acknowledges the message and schedules a
new one with `attempt + 1` after a delay. The delay is the subject of this document.

**Redelivery.** The handler did not acknowledge within `visibilityTimeoutSec`. Another consumer claims the
message with XAUTOCLAIM and runs it again, possibly while the first run is still going. Redelivery is how we
survive crashed workers; it is also why every handler must be idempotent.

## Backoff

We use exponential backoff with full jitter:

```
delay(n) = random(0, min(retryBackoffMaxMs, retryBackoffMs * 2^(n-1)))
```

where `n` is the retry number (1 for the first retry). Full jitter spreads retries of many jobs that failed
together, so they do not come back as a synchronised wave. Compared with plain exponential backoff it gives
a slightly longer average delay and a much flatter load on the thing that was failing.

### Defaults

| Setting | Default | Notes |
|---|---|---|
| `retryBackoffMs` | 500 | base delay; 2000 or more for queues calling third-party APIs |
| `retryBackoffMaxMs` | 60000 | cap on a single delay |
| `maxAttempts` | 8 | the first run counts as attempt 1 |
| `visibilityTimeoutSec` | 30 | at least 3x the handler's p99 |

With the defaults a job that keeps failing is parked after seven retries and at most 63.5 seconds of waiting
in total (about half that on average, thanks to the jitter). Queues with long outages on the other side (merchant webhooks) use much larger values; see the
webhook-delivery queue settings.

### Which errors are retried

- Network errors, timeouts, HTTP 5xx and HTTP 429 from vendors: retried.
- HTTP 4xx other than 429, validation errors, `NonRetryableError` thrown by the handler: parked immediately.
- PG-40001 inside a handler is retried by the database layer first (ledger-writer's own loop) and only counts as
  a job failure if that loop gives up.

## Dead-letter streams

After `maxAttempts` the message is moved to `<queue>:dlq` with the last error attached. We considered dropping
failed jobs and logging them instead, and rejected it: payouts and captures must never disappear silently.
Parked messages are replayed with `nwctl conveyor dlq replay`, which resets the attempt counter. An alert fires
when a DLQ grows by more than 50 messages in an hour.

## Idempotency keys

Because of redelivery, a handler that calls out (Stripe, email provider, merchant webhooks) must pass an
idempotency key that is fixed before the job is enqueued. Queues can declare `requiresIdempotencyKey: true`;
enqueue then rejects payloads without a key. payments-capture and refunds-execute declare it.

## Alternatives considered

- **Fixed delay between retries.** Simple, but a vendor outage still produces a constant stream of retries from
  every failed job, and jobs that failed together retry together.
- **Exponential backoff without jitter.** Better, but synchronised waves remain; we saw them in the email-send
  queue during the February mail provider outage.
- **Per-queue circuit breakers.** Useful and still on the list, but they solve a different problem: stopping
  work when a dependency is down, not spacing retries.

## Rollout

1. Library change behind a per-queue opt-in (conveyor v1.6.0).
2. Opt in email-send and webhook-delivery first, watch a week.
3. Make it the default for all queues (v1.7.0); queues with explicit settings keep them.
4. Remove the immediate-retry code path (v1.8.0).
"""

RB_DEPLOY = """# Deploy pipeline

Owner: Marcus Oyelaran. Covers every service in the platform-infra repo and the console.

## The path of a change

1. A PR merges to `main`.
2. `.github/workflows/deploy.yml` builds the image, runs unit and integration tests, pushes the image to ECR
   tagged with the full git sha, and bumps the tag in the service's chart values.
3. Argo CD notices the change and syncs **staging** at once.
4. Production needs a manual approval in the GitHub `production` environment. After approval Argo CD syncs
   production, where Argo Rollouts runs the canary.

A normal change is in production 25-40 minutes after merge, most of it waiting for the canary.

## Charts and values

Every service has a Helm chart under `deploy/helm/`. Environment overrides live in
`deploy/helm/values-staging.yaml` and `deploy/helm/values-prod.yaml`: replica counts, HPA limits, resources and
env vars. Never `kubectl edit` anything that a chart manages; Argo CD will revert it within three minutes and
nobody will know why your fix disappeared.

## Canary

Argo Rollouts shifts traffic 10% -> 30% -> 60% -> 100% with five-minute pauses. At each step the analysis
template compares the canary's 5xx rate and p95 latency with the stable version. It aborts automatically when
the 5xx rate goes above 1% or p95 doubles. An aborted rollout leaves the stable version serving everything;
the failed version shows as *Degraded* in Argo CD until the next sync.

## Database migrations

Migrations run in a Helm `pre-upgrade` hook Job called `db-migrate` before any new pod starts. Rules:

- Migrations must be backwards compatible with the running version (expand, deploy, contract).
- No long locks: `ALTER TABLE ... ADD COLUMN` with a volatile default, new indexes without `CONCURRENTLY`
  and similar are rejected by the migration linter.
- The hook has a 10-minute timeout; longer backfills belong in a conveyor job, not in a migration.

## Troubleshooting

### Helm upgrade fails with ECONNREFUSED in the db-migrate hook

Symptom: the rollout stops before the canary, and the `db-migrate` pod logs
`Error: connect ECONNREFUSED 172.20.14.9:6432` within the first second.

Cause: the pod has an istio-proxy sidecar. The migration container started before the sidecar was ready,
and outbound traffic is redirected to a proxy that isn't listening yet, so the connection to pgbouncer is
refused. It is a startup race, which is why a retry of the deploy sometimes passes.

Fix (in place since May 2024): the hook's pod template carries the annotation
`proxy.istio.io/config: '{ "holdApplicationUntilProxyStarts": true }'`, so the application container only
starts once the proxy is up. `migrate.sh` ends with `curl -fsS -XPOST localhost:15020/quitquitquit` so the
sidecar exits and the Job can complete. If you see the error again, check that a chart change didn't drop the
annotation.

Don't confuse it with `ECONNRESET` from conveyor workers, which is an idle connection being dropped, or
with `ECONNREFUSED 127.0.0.1:6379` on a laptop, which just means local Redis isn't running.

### ImagePullBackOff

The tag doesn't exist in ECR, almost always because the build step failed and the values bump ran anyway.
Re-run the workflow from the build job.

### Rollout stuck at a pause

Someone paused it by hand (`kubectl argo rollouts pause`). Check #platform before promoting it; there is
usually a reason.

## Rolling back

`nwctl rollout undo <service>` returns to the previous stable ReplicaSet within a minute. Images are kept for
30 days. Roll back first and investigate afterwards; a rollback never needs approval.

## Freezes

Deploy freezes (Friday afternoons, Black Friday week, the PG16 cutover) are enforced by a required check on the
`production` environment. Hotfixes during a freeze need the on-call lead's approval in the PR.
"""

RB_ONCALL = """# On-call handbook

Owner: Sam Whitlock. Applies to the platform-oncall and payments-oncall rotations.

## The rotation

Each rotation has a primary and a secondary. Shifts run Monday 10:00 CET to Monday 10:00 CET; from October
2024 in two-week blocks, with a shadow week for anyone new to the rotation. The schedule lives in PagerDuty;
if it disagrees with a spreadsheet, PagerDuty wins.

While on call you keep a laptop within reach and acknowledge high-urgency pages within 15 minutes. If that
won't work for a few hours, create a PagerDuty override with whoever covers you. A Slack message alone does
not move the pager.

## Handing over

Handover is Monday 10:00 CET in the #oncall huddle and takes ten minutes. Before it, the outgoing engineer
posts a written summary in #oncall:

- incidents and pages of the week, with links;
- anything still degraded or being watched (a capped autoscaler, a paused queue, a noisy alert);
- DLQ state of the conveyor queues;
- promises made to other teams or to support.

The incoming engineer reads it, asks questions in the huddle, and acknowledges in the thread. Handover is
done when the incoming person says so, not when the outgoing one leaves.

## Pages and urgency

High urgency pages call your phone: customer-facing errors, payment failures, data at risk. Low urgency
notifications only appear in the app and in #oncall and wait for business hours.

If you want the on-call engineer's attention for something that can wait, post in #oncall and tag
@platform-oncall. Use `/pd trigger` only when it cannot wait until morning.

## Incidents

1. Declare early. Create a channel named `#inc-<number>-<short-name>` and start with one line of impact.
2. Pick an incident commander. On a small incident that's you; as soon as more than two people are working,
   hand the commander role to someone who is not typing commands.
3. The commander updates the status page: first update within 15 minutes, then every 30.
4. Mitigate before you investigate. Flags off, rollback, scale, pause queues.
5. Close the incident in the channel with a summary and the link to the postmortem draft.

Postmortems are blameless and due within five working days for SEV-1 and SEV-2.

## Getting help

If you're stuck for 20 minutes, pull in the secondary with *Add responders*. After that, the service owners:
payments Priya, database Hana, conveyor Leah, console Tomás. Sam is the last step of the escalation policy and
would rather be woken than find out in the morning.

## Useful commands

- `patronictl -c /etc/patroni/patroni.yml list` - who is the Postgres leader, how far behind are replicas.
- `SHOW POOLS;` on a pgbouncer admin console - waiting clients per pool.
- `nwctl conveyor stats` - queue depth, DLQ size and oldest message per queue.
- `nwctl rollout undo <service>` - roll back a deployment.
- `nwctl db connect --replica` - read-only psql through the bastion (needs the pg-readonly role).

## Daily checks

- Conveyor DLQ panel: more than 50 parked jobs on a queue means a ticket.
- Replication lag panel.
- Error budget burn for payments-api (99.95% monthly SLO, 21.6 minutes of budget).

## Pay and time off

On-call is paid as a weekly allowance plus a per-night amount for pages between 22:00 and 07:00. Log night
pages in the sheet linked from the #oncall channel topic. After a night with more than one page you start
late the next day; tell your lead, don't ask.
"""

DD_LIVE_DATA = """# Design: live data in the merchant console

Author: Tomás Ferreira. Status: accepted (ADR-014, 2024-10-08). Reviewers: Inês Duarte, Marcus Oyelaran.

## Problem

Every widget in the console fetched its own data and many refreshed every five seconds. A single open
overview page made about 34 requests every 5 seconds; a merchant with several tabs open exceeded the API
gateway's limit of 20 requests per second per console session and got HTTP 429 responses. TanStack Query's
default of retrying failed requests three times, and refetching everything when the window regains focus,
multiplied the load. That was INC-2377 on 18 September 2024.

Most of this data doesn't need to be live. Balances change a few times an hour, payouts once a day. Only the
payments feed is genuinely live: merchants keep it open on a second screen during sales.

## Goals

- The console never causes 429s for a normal merchant, however many tabs they open.
- New payments appear in the feed within two seconds.
- No new infrastructure if we can avoid it.

## Options

### 1. Poll less

Raise `refetchInterval` to 30 s and `staleTime` to 30 s, stop retrying 4xx responses, fetch the overview with one
`/v1/console/summary` request. Cheap and mostly done as the INC-2377 hotfix. Doesn't make the feed faster.

### 2. WebSockets

Full duplex, which we don't need. Our gateway and the corporate proxies of several large merchants handle
WebSockets badly, and we would have to write reconnection and heartbeat handling ourselves.

### 3. Server-sent events

One long-lived HTTP response per tab carrying `text/event-stream`. The gateway already streams responses for
export downloads. The browser's `EventSource` reconnects on its own and sends `Last-Event-ID`, so the server
can resend what the client missed.

## Decision

Server-sent events for the payments feed on `/v1/console/stream`; option 1 for everything else.

## How it works

- The stream endpoint authenticates with the session cookie, then subscribes to the merchant's channel on the
  internal event bus.
- Each event has an `id` (the payment's sequence number); after a reconnect the server replays events after
  `Last-Event-ID` from a 10-minute buffer, and the client refetches the feed if the gap is larger.
- A comment line is sent every 20 seconds so proxies and the load balancer don't close a quiet stream.
- Responses carry `X-Accel-Buffering: no` so the ingress doesn't hold events back.
- Several tabs of one merchant share a stream through a BroadcastChannel leader tab, so ten open tabs still
  mean one connection.

## Query defaults for the rest of the console

| Setting | Value |
|---|---|
| `staleTime` | 30 s |
| `refetchInterval` | off, 30 s for balances |
| `refetchOnWindowFocus` | payments list only |
| `retry` | up to 2, never for 4xx (429 included) |

These live in the `useConsoleQuery` wrapper; new widgets use it instead of calling `useQuery` directly.

## Rollout

Behind the flag `console.live_feed_sse`: internal merchants first, then 10%, 50%, 100% over three weeks.
The old polling feed stays in the code for one release after 100% and is then removed.

## Results

At 100% (12 November 2024) console request volume was down 71% week over week and the gateway returned no
429s to console sessions. Median time from payment to feed dropped from about 3 s (half the polling interval
plus request time) to 400 ms.
"""

DOCS: list[Doc] = [
    Doc(
        "pm-inc2291",
        "payments",
        "incident",
        "2024-03-19",
        "priya",
        "postmortems/INC-2291.md",
        "Postmortem: INC-2291 duplicate card captures",
        PM_INC2291,
        ("INC-2291", "postmortem", "idempotency"),
    ),
    Doc(
        "rb-webhooks",
        "payments",
        "runbook",
        "2024-08-14",
        "priya",
        "wiki/payments/runbook-webhooks.md",
        "Runbook: Stripe webhooks",
        RB_WEBHOOKS,
        ("webhooks", "runbook", "stripe"),
    ),
    Doc(
        "rb-failover",
        "platform",
        "runbook",
        "2024-09-12",
        "hana",
        "wiki/platform/runbooks/postgres-failover.md",
        "Runbook: Postgres failover and replication lag",
        RB_FAILOVER,
        ("postgres", "runbook", "patroni"),
    ),
    Doc(
        "pm-inc2340",
        "platform",
        "incident",
        "2024-07-09",
        "hana",
        "postmortems/INC-2340.md",
        "Postmortem: INC-2340 pgbouncer refused client connections",
        PM_INC2340,
        ("INC-2340", "postmortem", "pgbouncer"),
    ),
    Doc(
        "dd-conveyor",
        "platform",
        "decision",
        "2024-04-09",
        "leah",
        "wiki/platform/design/conveyor-retries.md",
        "Design: retries and redelivery in conveyor",
        DD_CONVEYOR,
        ("conveyor", "retries", "design"),
    ),
    Doc(
        "rb-deploy",
        "platform",
        "runbook",
        "2024-06-03",
        "marcus",
        "wiki/platform/deploy-pipeline.md",
        "Deploy pipeline",
        RB_DEPLOY,
        ("deploy", "runbook", "helm"),
    ),
    Doc(
        "rb-oncall",
        "platform",
        "runbook",
        "2024-10-01",
        "sam",
        "wiki/platform/oncall-handbook.md",
        "On-call handbook",
        RB_ONCALL,
        ("oncall", "runbook"),
    ),
    Doc(
        "dd-live-data",
        "dashboard",
        "decision",
        "2024-10-08",
        "tomas",
        "wiki/dashboard/design/live-data.md",
        "Design: live data in the merchant console",
        DD_LIVE_DATA,
        ("sse", "design", "polling"),
    ),
]
