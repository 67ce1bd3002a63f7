"""Dashboard scope: the merchant console (React, Vite, TanStack Query), its API usage, tests and releases."""

from __future__ import annotations

from .model import Copy, Doc, thread

S = "dashboard"

DOCS: list[Doc] = []

# --- INC-2377: the polling storm, one long thread -------------------------------------------------------------
DOCS += thread(
    "slack/#dashboard-dev",
    S,
    "#dashboard-dev",
    ("INC-2377", "polling"),
    [
        (
            "inc2377-open",
            "2024-09-18",
            "tomas",
            "Console is showing 'Something went wrong' on half the widgets for big merchants. Network tab is a wall of "
            "HTTP 429 from /v1/console/*. Opening INC-2377.",
        ),
        (
            "inc2377-count",
            "2024-09-18",
            "ines",
            "One open tab of the overview page makes about 34 requests every 5 seconds: each widget has its own "
            "useQuery with refetchInterval: 5000. A merchant with six tabs open is over 40 req/s on their own.",
        ),
        (
            "inc2377-limit",
            "2024-09-18",
            "marcus",
            "The gateway limit for console sessions is 20 req/s. It's been that way since spring; what changed is the "
            "new 'live balances' widgets added in 3.8.0.",
        ),
        (
            "inc2377-retry",
            "2024-09-18",
            "tomas",
            "And we make it worse ourselves: TanStack Query's default retry: 3 treats 429 like any error, so every "
            "throttled request comes back three more times.",
        ),
        (
            "inc2377-focus",
            "2024-09-18",
            "ines",
            "refetchOnWindowFocus is on by default too, so alt-tabbing back into the console fires every query at once.",
        ),
        (
            "inc2377-hotfix",
            "2024-09-18",
            "tomas",
            "Hotfix 3.8.1: refetchInterval 30s for everything except the payments feed, retry disabled for 429 responses, "
            "refetchOnWindowFocus off for the overview page. Deploying now.",
        ),
        (
            "inc2377-better",
            "2024-09-18",
            "marcus",
            "429s dropped from ~2,000/min to under 20/min after 3.8.1. Keeping the incident open until the big merchants "
            "confirm.",
        ),
        (
            "inc2377-summary-endpoint",
            "2024-09-19",
            "ines",
            "Longer term: one /v1/console/summary call for the overview instead of 14 small ones. Backend says two days.",
        ),
        (
            "inc2377-sse",
            "2024-09-19",
            "tomas",
            "For the live payments feed, polling is the wrong tool entirely. I'll write up server-sent events; the "
            "gateway already supports long-lived connections for the export downloads.",
        ),
        (
            "inc2377-close",
            "2024-09-20",
            "tomas",
            "INC-2377 closed. Design doc for live data is in wiki/dashboard/design/live-data.md, comments welcome.",
        ),
        (
            "inc2377-support",
            "2024-09-19",
            "ruth",
            "Support side: 23 merchants wrote in about the broken overview; all have the 'we fixed it, please reload' "
            "reply now.",
        ),
    ],
)

DOCS += [
    Doc(
        "adr014",
        S,
        "decision",
        "2024-10-08",
        "tomas",
        "wiki/dashboard/adr/adr-014-live-data.md",
        "ADR-014: server-sent events for the live payments feed",
        "The live payments feed moves from polling to server-sent events on /v1/console/stream. Everything else "
        "keeps TanStack Query with refetchInterval 30s or more. We picked SSE over WebSockets because the data only "
        "flows one way, it goes through the gateway and proxies as plain HTTP, and EventSource reconnects by itself.",
        ("sse", "adr", "polling"),
    ),
    Doc(
        "stale-time",
        S,
        "note",
        "2024-09-25",
        "tomas",
        "wiki/dashboard/conventions.md",
        "Query defaults",
        "Console query defaults since INC-2377: staleTime 30s, refetchInterval off unless the widget is live, "
        "refetchOnWindowFocus only for the payments list, and retry skips 4xx responses (429 included). New widgets "
        "should use the useConsoleQuery wrapper, which sets all of this.",
        ("react-query", "conventions"),
    ),
    Doc(
        "sse-rollout",
        S,
        "chat",
        "2024-11-12",
        "tomas",
        "slack/#dashboard-dev",
        "#dashboard-dev",
        "Live feed over SSE is at 100% of merchants. Request volume from the console is down 71% week over week and "
        "the gateway 429 count is zero for console sessions.",
        ("sse",),
    ),
    Doc(
        "sse-proxy-buffering",
        S,
        "chat",
        "2024-10-29",
        "ines",
        "slack/#dashboard-dev",
        "#dashboard-dev",
        "SSE events arrived in bursts every ~30s in staging: the ingress was buffering the response. Setting "
        "X-Accel-Buffering: no on the stream response fixed it.",
        ("sse",),
    ),
    Doc(
        "sse-heartbeat",
        S,
        "note",
        "2024-10-30",
        "ines",
        "wiki/dashboard/design/live-data-notes.md",
        "Keeping the stream open",
        "The stream sends a comment line (': ping') every 20 s; without it the load balancer's 60 s idle timeout "
        "closes quiet streams and EventSource reconnects in a loop.",
        ("sse",),
    ),
    Doc(
        "strict-mode-twice",
        S,
        "note",
        "2024-02-28",
        "ines",
        "wiki/dashboard/faq.md",
        "Why does my effect run twice?",
        "In development React 18 StrictMode mounts, unmounts and mounts every component again, so effects run twice "
        "and you see each request twice in the network tab. That's expected and doesn't happen in production builds. "
        "Don't remove StrictMode to make it go away.",
        ("react",),
    ),
    Doc(
        "payouts-table-freeze",
        S,
        "note",
        "2024-05-15",
        "ines",
        "jira/NW-1477",
        "NW-1477 Payouts table freezes the tab",
        "NW-1477: opening the payouts table froze the browser tab for merchants with more than 5,000 payouts; we "
        "rendered every row. Fixed with @tanstack/react-virtual, only visible rows are in the DOM now.",
        ("performance",),
    ),
    Doc(
        "search-input-lag",
        S,
        "note",
        "2024-06-06",
        "ines",
        "notes/ines.md",
        "Search box input lag",
        "Input lag in the transaction search box came from filtering 10k rows on every keystroke. Now debounced "
        "250 ms and filtered on the server for anything over 500 rows.",
        ("performance",),
    ),
    Doc(
        "nw1423-ticket",
        S,
        "note",
        "2024-03-07",
        "ines",
        "jira/NW-1423",
        "NW-1423 CSV export dates off by one",
        "NW-1423: payout dates in the CSV export were a day early for merchants west of UTC because we formatted "
        "with toISOString(). Fixed with formatInTimeZone from date-fns-tz and the merchant's time zone setting.",
        ("csv", "timezones"),
    ),
    Doc(
        "flaky-tests",
        S,
        "note",
        "2024-10-17",
        "ines",
        "wiki/dashboard/testing.md",
        "Hanging tests in CI",
        "The October CI flakiness in the console: tests that combine vi.useFakeTimers() with MSW hung now and then, "
        "because MSW resolves responses on real timers. Use vi.useFakeTimers({ shouldAdvanceTime: true }) in any "
        "test that also mocks the network.",
        ("testing", "ci"),
    ),
    Doc(
        "playwright-retries",
        S,
        "note",
        "2024-07-11",
        "tomas",
        "wiki/dashboard/testing.md",
        "Playwright retries",
        "playwright.config.ts sets retries: 2 on CI only. A test that passes on retry shows up as flaky in the HTML "
        "report; fix those within the sprint instead of letting the retries hide them.",
        ("testing", "ci"),
    ),
    Doc(
        "vite-migration",
        S,
        "note",
        "2024-01-25",
        "tomas",
        "wiki/dashboard/history.md",
        "Move to Vite",
        "Migration from Create React App to Vite done in January: dev server start went from 40 s to 2 s and the "
        "production build from 3 minutes to 50 s. Env vars are now VITE_* instead of REACT_APP_*.",
        ("build",),
    ),
    Doc(
        "console-versions",
        S,
        "note",
        "2024-09-18",
        "tomas",
        "wiki/dashboard/releases.md",
        "Console releases",
        "Console release numbers are separate from payments-api: 3.8.0 added the live balances widgets, 3.8.1 was "
        "the INC-2377 hotfix, 3.9.0 (October) switched the payments feed to SSE.",
        ("release",),
    ),
    Doc(
        "bundle-size",
        S,
        "note",
        "2024-04-18",
        "tomas",
        "notes/tomas.md",
        "Bundle budget",
        "Bundle budget for the console entry chunk is 250 kB gzipped; CI fails above that. The charts library is "
        "lazy-loaded on the reports route, which kept us under.",
        ("performance", "build"),
    ),
    Doc(
        "a11y-audit",
        S,
        "note",
        "2024-08-22",
        "ines",
        "wiki/dashboard/accessibility.md",
        "Accessibility audit",
        "External accessibility audit found 14 issues, 3 serious: the date picker isn't keyboard-operable, status "
        "badges rely on colour alone, and modal focus isn't trapped. All three fixed in 3.7.2.",
        ("a11y",),
    ),
    Doc(
        "session-refresh",
        S,
        "note",
        "2024-03-26",
        "tomas",
        "wiki/dashboard/auth.md",
        "Session refresh",
        "Console sessions last 12 hours; the access token is refreshed silently every 10 minutes. A 401 from the API "
        "triggers one refresh attempt and then sends the user to the login page with the current path saved.",
        ("auth",),
    ),
    Doc(
        "feature-flags-console",
        S,
        "note",
        "2024-05-23",
        "tomas",
        "wiki/dashboard/conventions.md",
        "Feature flags in the console",
        "Console feature flags come from the flags service at login and are cached for the session. Use the "
        "useFlag hook; never read flags from localStorage, support can't see or change those.",
        ("flags",),
    ),
    Doc(
        "i18n",
        S,
        "note",
        "2024-06-26",
        "ines",
        "wiki/dashboard/conventions.md",
        "Translations",
        "All user-facing strings go through i18next with keys in locales/en/*.json. German and French are done by "
        "the agency every two weeks; missing keys fall back to English and show up in the weekly report.",
        ("i18n",),
    ),
    Doc(
        "sentry-console",
        S,
        "note",
        "2024-02-06",
        "tomas",
        "notes/tomas.md",
        "Errors from the console",
        "Sentry project console-prod. The error boundary around each widget reports with the widget name as a tag, "
        "so one broken widget doesn't take the page down and we can still tell which one it was.",
        ("monitoring",),
    ),
    Doc(
        "csv-export-limits",
        S,
        "note",
        "2024-07-24",
        "ines",
        "wiki/dashboard/faq.md",
        "Large CSV exports",
        "Exports above 100k rows are generated in the background and emailed as a link valid for 7 days. Merchants "
        "kept hitting the 30 s request timeout before that.",
        ("csv",),
    ),
    Doc(
        "cve-braces",
        S,
        "note",
        "2024-05-20",
        "kofi",
        "wiki/security/advisories.md",
        "CVE-2024-4068 (braces)",
        "CVE-2024-4068: braces before 3.0.3 can exhaust memory on input with unbalanced braces. We only pull it in "
        "through micromatch in the build and test tooling, but it still runs in CI, so it's bumped through pnpm "
        "overrides in the console repo.",
        ("security", "cve"),
    ),
    Doc(
        "dash-design-review",
        S,
        "meeting",
        "2024-10-01",
        "tomas",
        "meetings/dashboard-sync/2024-10-01.md",
        "Dashboard sync 2024-10-01",
        "Design review of the live data doc: agreed on SSE for the payments feed only; balances stay on 30 s "
        "polling because they change a few times an hour. Reconnect backoff capped at 30 s.",
        ("sse", "meeting"),
    ),
    Doc(
        "dash-sync-oct-summary",
        S,
        "meeting",
        "2024-10-01",
        "tomas",
        "meetings/dashboard-sync/2024-10-01.md",
        "Dashboard sync 2024-10-01",
        "The /v1/console/summary endpoint is live; the overview now makes one request instead of 14. Ines removes the "
        "old per-widget hooks next sprint.",
        ("meeting", "polling"),
    ),
    Doc(
        "dash-sync-oct-a11y",
        S,
        "meeting",
        "2024-10-01",
        "tomas",
        "meetings/dashboard-sync/2024-10-01.md",
        "Dashboard sync 2024-10-01",
        "Accessibility: keyboard support in the new filters panel is a release blocker from now on, same as failing "
        "tests.",
        ("meeting", "a11y"),
    ),
    Doc(
        "dash-sync-nov-bf",
        S,
        "meeting",
        "2024-11-05",
        "tomas",
        "meetings/dashboard-sync/2024-11-05.md",
        "Dashboard sync 2024-11-05",
        "Black Friday: the console follows the platform freeze. Last feature release is 3.10.0 on 20 November; "
        "after that only fixes approved by the on-call lead.",
        ("meeting", "freeze"),
    ),
    Doc(
        "dash-sync-nov-charts",
        S,
        "meeting",
        "2024-11-05",
        "tomas",
        "meetings/dashboard-sync/2024-11-05.md",
        "Dashboard sync 2024-11-05",
        "Charts library: stay on Recharts for now; the canvas-based alternative was faster but broke screen reader "
        "support in our tests.",
        ("meeting",),
    ),
    Doc(
        "mem-tomas-pr",
        S,
        "chat",
        "2024-04-02",
        "agent",
        "memory/assistant-dashboard.jsonl",
        "Saved memory",
        "Tomás asks for a screenshot or a short screen recording in every console PR that changes what users see.",
        ("process",),
    ),
    Doc(
        "mem-ines-storybook",
        S,
        "chat",
        "2024-06-11",
        "agent",
        "memory/assistant-dashboard.jsonl",
        "Saved memory",
        "Inês keeps the Storybook at storybook.console.northwind.example up to date; new shared components need a "
        "story before review.",
        ("process",),
    ),
    Doc(
        "mem-dash-owner",
        S,
        "chat",
        "2024-09-20",
        "agent",
        "memory/assistant-dashboard.jsonl",
        "Saved memory",
        "The user is new on the dashboard team. Tomás is their mentor for the first month; questions about the API "
        "gateway go to Marcus.",
        ("people",),
    ),
    Doc(
        "dash-msw",
        S,
        "chat",
        "2024-03-13",
        "ines",
        "slack/#dashboard-dev",
        "#dashboard-dev",
        "All API mocks for local dev and tests are MSW handlers in src/mocks/handlers.ts. If a page works in "
        "Storybook but not locally, the handler probably returns a shape the real API dropped.",
        ("testing",),
    ),
    Doc(
        "dash-node",
        S,
        "chat",
        "2024-02-20",
        "tomas",
        "slack/#dashboard-dev",
        "#dashboard-dev",
        "Console builds use the same pinned Node as the services now (.nvmrc). If pnpm install complains about "
        "engines, run `nvm use` first.",
        ("node", "build"),
    ),
    Doc(
        "dash-timezone-display",
        S,
        "chat",
        "2024-03-08",
        "ines",
        "slack/#dashboard-dev",
        "#dashboard-dev",
        "Rule from NW-1423: dates are stored and sent in UTC, and only formatted in the merchant's time zone at the "
        "very last moment, in the component. No toISOString() for anything a person reads.",
        ("timezones",),
    ),
    Doc(
        "dash-polling-hook",
        S,
        "note",
        "2024-06-20",
        "tomas",
        "notes/tomas.md",
        "usePolling",
        "dashboard/src/hooks/usePolling.ts predates TanStack Query and has no backoff at all. It's only used by the "
        "legacy disputes page; don't use it for anything new.",
        ("polling",),
    ),
    Doc(
        "dash-dark-mode",
        S,
        "chat",
        "2024-07-17",
        "ines",
        "slack/#dashboard-dev",
        "#dashboard-dev",
        "Dark mode shipped behind the console.dark_mode flag; tokens come from the design system, don't hardcode "
        "colours in components.",
        ("ui",),
    ),
]

COPIES: list[Copy] = [
    Copy(
        "stale-time-slack",
        "stale-time",
        "slack/#dashboard-dev",
        "2024-09-25",
        kind="chat",
        title="#dashboard-dev",
        prefix="New defaults, please use them: ",
    ),
    Copy(
        "stale-time-pr",
        "stale-time",
        "notes/tomas.md",
        "2024-09-26",
        kind="note",
        title="useConsoleQuery",
        edits=(
            (
                "Console query defaults since INC-2377:",
                "Defaults baked into useConsoleQuery (after INC-2377):",
            ),
        ),
    ),
    Copy(
        "cve-braces-console",
        "cve-braces",
        "slack/#dashboard-dev",
        "2024-05-21",
        author="ines",
        kind="chat",
        title="#dashboard-dev",
        suffix=" PR is up.",
    ),
    Copy(
        "adr014-sync",
        "adr014",
        "meetings/dashboard-sync/2024-10-08.md",
        "2024-10-08",
        kind="meeting",
        title="Dashboard sync 2024-10-08",
        prefix="Accepted: ",
    ),
]

# --- More notes: everyday knowledge and look-alikes ------------------------------------------------------------
DOCS += [
    Doc(
        "dash-csp",
        S,
        "note",
        "2024-04-11",
        "kofi",
        "wiki/dashboard/security.md",
        "Content Security Policy",
        "The console's CSP allows scripts only from self and js.stripe.com, frames only from js.stripe.com and "
        "hooks.stripe.com. A new third-party script needs a CSP change reviewed by Kofi.",
        ("security",),
    ),
    Doc(
        "dash-release-days",
        S,
        "note",
        "2024-02-01",
        "tomas",
        "wiki/dashboard/releases.md",
        "When the console ships",
        "Console releases go out Tuesdays and Thursdays before 14:00 CET so there's time to watch them. Fixes can go "
        "any day except during a platform freeze.",
        ("release",),
    ),
    Doc(
        "dash-react-19",
        S,
        "chat",
        "2024-12-03",
        "tomas",
        "slack/#dashboard-dev",
        "#dashboard-dev",
        "Holding off on React 19 until the charts library and react-virtual have released compatible versions. "
        "Revisit in February.",
        ("react",),
    ),
    Doc(
        "dash-analytics",
        S,
        "note",
        "2024-05-29",
        "ines",
        "wiki/dashboard/conventions.md",
        "Product analytics",
        "Product analytics go to the self-hosted PostHog. No personal data in event properties: merchant id yes, "
        "email or cardholder name never.",
        ("analytics", "privacy"),
    ),
    Doc(
        "dash-e2e-env",
        S,
        "note",
        "2024-07-11",
        "tomas",
        "wiki/dashboard/testing.md",
        "Where e2e tests run",
        "Playwright e2e tests run against staging after each deploy there, with a merchant that the seed script "
        "recreates every Sunday. Don't hand-edit that merchant; your changes vanish on Sunday anyway.",
        ("testing",),
    ),
    Doc(
        "dash-gateway-limits",
        S,
        "chat",
        "2024-09-18",
        "marcus",
        "slack/#api-gateway",
        "#api-gateway",
        "Gateway limits for reference: console sessions 20 req/s, public API keys 100 req/s with bursts to 200. The "
        "console limit is per session cookie, so tabs share it.",
        ("rate-limit",),
    ),
]
DOCS += [
    Doc(
        "dash-support-chat",
        S,
        "note",
        "2024-06-13",
        "tomas",
        "notes/tomas.md",
        "Support chat widget",
        "The support chat bubble opens its own WebSocket to the chat vendor. It has nothing to do with our API or "
        "the live feed; if it's broken, it's the vendor's status page first.",
        ("vendors",),
    ),
    Doc(
        "dash-payout-polling",
        S,
        "chat",
        "2024-10-09",
        "ines",
        "slack/#dashboard-dev",
        "#dashboard-dev",
        "Payout status still refreshes every 60 s and will stay that way: it changes once a day, a stream would be "
        "overkill.",
        ("polling",),
    ),
    Doc(
        "dash-chromatic",
        S,
        "chat",
        "2024-08-01",
        "ines",
        "slack/#dashboard-dev",
        "#dashboard-dev",
        "The flaky Chromatic snapshots were font loading: half the runs rendered the fallback font. Inter is now "
        "bundled locally and preloaded in Storybook, diffs are stable.",
        ("testing",),
    ),
    Doc(
        "dash-coverage",
        S,
        "note",
        "2024-04-25",
        "tomas",
        "wiki/dashboard/testing.md",
        "Coverage threshold",
        "vitest coverage threshold is 80% of lines for src/ (generated API clients excluded). CI fails below it; "
        "don't lower it in the same PR that drops coverage.",
        ("testing", "ci"),
    ),
    Doc(
        "dash-safari-loop",
        S,
        "note",
        "2024-05-08",
        "tomas",
        "jira/NW-1462",
        "NW-1462 Safari login loop",
        "NW-1462: Safari users bounced between login and the console forever after a silent refresh; ITP blocked "
        "the auth cookie from the old auth domain. Auth now runs on auth.console.northwind.example, same site.",
        ("auth",),
    ),
    Doc(
        "dash-error-copy",
        S,
        "note",
        "2024-10-03",
        "ines",
        "wiki/dashboard/conventions.md",
        "Error messages",
        "'Something went wrong' is banned in new widgets. Say what failed and what the merchant can do, e.g. "
        "'Couldn't load payouts. Retry, or check the status page if this continues.'",
        ("ux",),
    ),
    Doc(
        "dash-oncall",
        S,
        "note",
        "2024-02-15",
        "tomas",
        "wiki/dashboard/faq.md",
        "Who handles console incidents",
        "The console has no rotation of its own. Incidents go through platform-oncall, who pull in Tomás or Inês "
        "for anything console-only.",
        ("oncall",),
    ),
    Doc(
        "dash-roadmap-q4",
        S,
        "meeting",
        "2024-09-03",
        "tomas",
        "meetings/dashboard-sync/2024-09-03.md",
        "Dashboard sync 2024-09-03",
        "Q4 plan: statements redesign, dark mode out of beta, and the live balances widgets. Accessibility fixes "
        "from the audit stay top of the list.",
        ("meeting", "roadmap"),
    ),
    Doc(
        "dash-msw-v2",
        S,
        "chat",
        "2024-04-16",
        "ines",
        "slack/#dashboard-dev",
        "#dashboard-dev",
        "MSW is on v2 now: handlers use http.get(...) and return HttpResponse.json(...) instead of rest.get and "
        "ctx. Old-style handlers in open PRs need rewriting before merge.",
        ("testing",),
    ),
    Doc(
        "dash-tanstack-v5",
        S,
        "note",
        "2024-02-22",
        "tomas",
        "wiki/dashboard/history.md",
        "TanStack Query v5",
        "Moved to TanStack Query v5: cacheTime is called gcTime now, and the 'loading' status became 'pending'. "
        "The codemod handled most of it; custom hooks needed a manual pass.",
        ("react-query",),
    ),
]
