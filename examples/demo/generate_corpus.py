"""Write ``corpus.jsonl``: the help-desk articles ``amelio demo`` indexes for search.

Run once (``python examples/demo/generate_corpus.py``) and commit the output: the
articles are written for the project from the templates below, about the example
skills' domains, so search, feedback and signals have something real to rank
without a download. The output is deterministic: re-running gives the same file.

Each domain lists tasks (a how-to and a checklist each), problems (a
troubleshooting article each) and terms (a short explainer each).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple


class Domain(NamedTuple):
    slug: str
    name: str
    tasks: list[tuple[str, str]]  # (task, steps)
    problems: list[tuple[str, str, str]]  # (symptom, cause, fix)
    terms: list[tuple[str, str]]  # (term, meaning)


DOMAINS = [
    Domain("git", "Git", [
        ("undo the last commit", "run git reset --soft HEAD~1 to keep the changes staged, or "
         "git revert HEAD when the commit was already pushed"),
        ("rebase a feature branch on main", "fetch, run git rebase origin/main, fix each "
         "conflict, git add the files and git rebase --continue"),
        ("squash commits before merging", "run git rebase -i with the base commit and mark "
         "every commit after the first as squash"),
        ("recover a deleted branch", "find the tip in git reflog and run git branch NAME SHA"),
        ("sign commits", "create a GPG or SSH key, set user.signingkey and commit.gpgsign true"),
        ("split a large pull request", "cut the work into independent commits, push one "
         "branch per commit series and open stacked pull requests"),
    ], [
        ("merge conflict markers left in a file", "a conflict was marked resolved too early",
         "search for <<<<<<< markers, edit the file, git add it and commit again"),
        ("push rejected as non-fast-forward", "the remote branch has commits you do not have",
         "git pull --rebase, then push; never force-push a shared branch"),
        ("detached HEAD after checkout", "a commit or tag was checked out instead of a branch",
         "create a branch with git switch -c NAME to keep the work"),
        ("large file rejected by the remote", "a binary over the size limit was committed",
         "remove it with git filter-repo and track such files with Git LFS"),
        ("credentials prompt on every push", "no credential helper is configured",
         "set credential.helper or switch the remote to SSH"),
        ("line endings change every file", "core.autocrlf differs between machines",
         "add a .gitattributes with text=auto and renormalize once"),
    ], [
        ("reflog", "the local history of where HEAD and branches pointed, kept for 90 days"),
        ("fast-forward merge", "a merge that only moves the branch pointer, with no merge "
         "commit"),
        ("cherry-pick", "copying one commit onto another branch"),
        ("stash", "a shelf for uncommitted changes, restored with git stash pop"),
        ("upstream branch", "the remote branch a local branch pulls from and pushes to"),
        ("bisect", "a binary search through history for the commit that broke something"),
    ]),
    Domain("deployment", "Deployment", [
        ("roll back a release", "redeploy the previous image tag, confirm health checks, then "
         "open an incident note explaining why"),
        ("run a database migration safely", "deploy the backward-compatible schema first, "
         "then the code, and drop old columns in a later release"),
        ("do a blue-green deployment", "start the new version beside the old, switch the load "
         "balancer, keep the old one warm for quick rollback"),
        ("enable a canary release", "route five percent of traffic to the new version and "
         "compare error rate and latency before widening"),
        ("set up a health check", "expose /health that checks dependencies and answers within "
         "a second; point the orchestrator's probe at it"),
        ("schedule a deployment freeze", "announce the window, protect the release branch and "
         "allow only hotfixes with two approvals"),
    ], [
        ("pods restart in a crash loop", "the process exits at start, often a missing "
         "environment variable", "read the previous container's logs and fix the config"),
        ("deployment stuck at zero available replicas", "the readiness probe never passes",
         "check the probe path and port and the app's startup time"),
        ("new release slower than the old one", "a query lost its index or a cache is cold",
         "compare traces of both versions and warm caches before switching traffic"),
        ("rollback failed because of the schema", "the migration was not backward compatible",
         "restore from the pre-deploy backup and split migrations in future"),
        ("configuration differs between staging and production", "values were edited by hand",
         "keep config in version control and render it per environment"),
        ("deploy pipeline times out", "image build has no layer cache",
         "cache dependencies in a separate layer and pin the base image"),
    ], [
        ("rolling update", "replacing instances a few at a time so the service stays up"),
        ("feature flag", "a switch that turns code on for some users without a deploy"),
        ("immutable artifact", "one build promoted unchanged from staging to production"),
        ("readiness probe", "the check that says an instance may receive traffic"),
        ("release train", "releases leaving on a fixed schedule with whatever is ready"),
        ("infrastructure as code", "servers and networks described in versioned files"),
    ]),
    Domain("docker", "Docker", [
        ("shrink a Docker image", "use a slim base, a multi-stage build and remove package "
         "caches in the same RUN layer"),
        ("run a container as a non-root user", "create a user in the Dockerfile and switch "
         "with USER before the entrypoint"),
        ("pass secrets to a build", "use BuildKit --secret mounts instead of ARG or ENV"),
        ("persist data with volumes", "mount a named volume at the data path; never write "
         "state into the image"),
        ("debug a running container", "docker exec -it into it, or run a debug sidecar with "
         "the same network namespace"),
        ("pin base image versions", "reference the image by tag and digest and update it "
         "with a bot that opens pull requests"),
    ], [
        ("container exits immediately", "the main process finished or crashed",
         "run it in the foreground and read docker logs"),
        ("build cache never reused", "COPY . comes before dependency installation",
         "copy the lock file first, install, then copy the source"),
        ("permission denied on a mounted volume", "the container user id differs from the "
         "host owner", "chown the volume or run with the matching uid"),
        ("image too large to push", "build tools and caches stay in the final image",
         "move the build to a separate stage"),
        ("DNS fails inside containers", "the host resolver is not reachable from the bridge",
         "set dns in daemon.json or use the host network for debugging"),
        ("port already allocated", "another container or process holds the host port",
         "stop it or publish on a different host port"),
    ], [
        ("multi-stage build", "a Dockerfile whose final stage copies only what it needs from "
         "earlier stages"),
        ("layer", "one filesystem change in an image, cached and shared between images"),
        ("entrypoint", "the command a container runs; CMD supplies its default arguments"),
        ("healthcheck", "a command Docker runs to mark a container healthy or not"),
        ("bind mount", "a host folder mounted into a container"),
        ("distroless image", "an image with the app and its runtime only, no shell"),
    ]),
    Domain("sql", "SQL", [
        ("find slow queries", "enable pg_stat_statements and sort by total time"),
        ("add an index without downtime", "CREATE INDEX CONCURRENTLY and check it is valid "
         "afterwards"),
        ("paginate large result sets", "use keyset pagination on an indexed column instead "
         "of OFFSET"),
        ("review a query plan", "run EXPLAIN ANALYZE and look for sequential scans and row "
         "estimates far from actual rows"),
        ("avoid SQL injection", "always bind parameters; never format user input into SQL"),
        ("back up a PostgreSQL database", "pg_dump in custom format, store it off-site and "
         "test a restore every month"),
    ], [
        ("query suddenly slow after a data load", "table statistics are stale",
         "run ANALYZE on the table"),
        ("deadlock detected errors", "two transactions lock rows in different orders",
         "lock rows in a consistent order and keep transactions short"),
        ("too many connections", "each worker opens its own connections",
         "put a pooler such as PgBouncer in front"),
        ("duplicate rows after an import", "no unique constraint on the natural key",
         "add the constraint and use INSERT ... ON CONFLICT"),
        ("N+1 queries from the ORM", "related rows are loaded one by one",
         "eager-load the relation or use a join"),
        ("disk full from table bloat", "autovacuum cannot keep up with updates",
         "tune autovacuum and run VACUUM on the table"),
    ], [
        ("transaction isolation", "how much one transaction sees of others' changes"),
        ("covering index", "an index that holds every column a query needs"),
        ("foreign key", "a constraint that a value exists in another table"),
        ("window function", "a calculation over related rows without grouping them away"),
        ("CTE", "a named subquery introduced with WITH"),
        ("vacuum", "PostgreSQL's cleanup of dead row versions"),
    ]),
    Domain("incident", "Incidents", [
        ("declare an incident", "open the incident channel, name an incident commander and "
         "post the first status within fifteen minutes"),
        ("write an incident summary", "state impact, timeline, root cause, resolution and "
         "follow-up actions with owners"),
        ("run a blameless postmortem", "focus on systems and decisions, not people, and agree "
         "on at most five actions"),
        ("update the status page", "say what is affected, what users can do and when the "
         "next update comes"),
        ("hand over an incident", "summarize the state, open questions and next steps in "
         "the channel before leaving"),
        ("set severity levels", "define sev1 to sev4 by user impact and who is paged"),
    ], [
        ("alerts fire but nobody responds", "the on-call rotation has a gap",
         "check the schedule and add an escalation policy"),
        ("too many noisy alerts", "thresholds page on symptoms nobody acts on",
         "alert on user-facing symptoms and route the rest to tickets"),
        ("root cause unclear after the incident", "logs rotated before anyone looked",
         "keep incident logs longer and snapshot them when an incident opens"),
        ("customers learned of the outage first", "no status update was posted",
         "make the status page the commander's first task"),
        ("follow-up actions never done", "they had no owner or date",
         "track them as tickets reviewed weekly"),
        ("same incident happens again", "the fix treated the symptom",
         "ask why five times and fix the contributing factors"),
    ], [
        ("incident commander", "the person who coordinates the response and decides"),
        ("MTTR", "mean time to restore service after a failure"),
        ("postmortem", "the written review of an incident and its lessons"),
        ("SLO", "the reliability target a service promises, such as 99.9 percent"),
        ("error budget", "the failures an SLO allows before releases slow down"),
        ("runbook", "step-by-step instructions for a known alert"),
    ]),
    Domain("release", "Release notes", [
        ("write release notes", "group changes into added, changed, fixed and removed, and "
         "write each for the user, not the developer"),
        ("announce a breaking change", "say what breaks, who is affected, and the migration "
         "steps, one release ahead"),
        ("generate a changelog from commits", "use conventional commit messages and a tool "
         "that groups them by type"),
        ("version a release", "follow semantic versioning: major for breaking, minor for "
         "features, patch for fixes"),
        ("publish a security fix", "release the patch, then publish the advisory with the "
         "affected versions and CVE"),
        ("deprecate a feature", "mark it deprecated, log a warning and remove it two minor "
         "versions later"),
    ], [
        ("release notes full of internal jargon", "they were copied from commit messages",
         "rewrite each line as the benefit to the user"),
        ("users missed a breaking change", "it was buried in a long list",
         "put breaking changes first under their own heading"),
        ("changelog and tags disagree", "the changelog was edited after tagging",
         "generate it in the release job from the tag"),
        ("wrong version number published", "the version was bumped by hand",
         "derive it from the tag in the build"),
        ("notes missing for a hotfix", "the hotfix skipped the release process",
         "make the notes a required step of every release"),
        ("customers ask what changed", "notes are only on the developer site",
         "link them from the product and the email announcement"),
    ], [
        ("semantic versioning", "MAJOR.MINOR.PATCH numbers that say how risky an upgrade is"),
        ("changelog", "the running list of notable changes per version"),
        ("release candidate", "a build that becomes the release if no blocker is found"),
        ("hotfix", "an urgent patch released outside the normal train"),
        ("deprecation", "an announcement that a feature will be removed"),
        ("conventional commits", "commit messages prefixed with feat, fix or chore"),
    ]),
    Domain("api", "API design", [
        ("version a REST API", "put the major version in the path and never break it; add "
         "fields instead of changing them"),
        ("design error responses", "return a stable error code, a human message and the "
         "field at fault, with the right HTTP status"),
        ("paginate an API", "return a cursor for the next page and keep page sizes bounded"),
        ("make requests idempotent", "accept an Idempotency-Key header and store the first "
         "response"),
        ("rate limit clients", "count requests per key in a window and answer 429 with "
         "Retry-After"),
        ("document an API with OpenAPI", "generate the spec from the code and publish it "
         "with examples"),
    ], [
        ("clients break after a release", "a field was renamed", "add the new field beside "
         "the old one and deprecate the old one"),
        ("duplicate orders from retries", "the create endpoint is not idempotent",
         "require an idempotency key"),
        ("timeouts on list endpoints", "they return every row", "paginate with a cursor"),
        ("inconsistent naming across endpoints", "no style guide", "adopt one casing and "
         "lint the spec in CI"),
        ("401 versus 403 confusion", "both are used for missing permissions",
         "401 when not authenticated, 403 when authenticated but not allowed"),
        ("webhooks lost during outages", "no retries", "retry with backoff and let "
         "receivers fetch missed events"),
    ], [
        ("idempotency", "doing a request twice has the same effect as once"),
        ("HATEOAS", "responses that link to the actions available next"),
        ("webhook", "an HTTP call the API makes to tell a client something happened"),
        ("cursor pagination", "pages addressed by an opaque position rather than an offset"),
        ("OpenAPI", "a machine-readable description of an HTTP API"),
        ("ETag", "a version tag that enables caching and safe concurrent updates"),
    ]),
    Domain("secrets", "Secrets", [
        ("rotate an API key", "create the new key, deploy it, confirm traffic uses it, then "
         "revoke the old one"),
        ("store secrets for an application", "keep them in a secret manager and inject them "
         "at start, never in the repository"),
        ("scan a repository for secrets", "run a secret scanner in pre-commit and in CI on "
         "every push"),
        ("respond to a leaked password", "revoke it at once, rotate related credentials and "
         "check the access logs"),
        ("share a secret with a colleague", "use the password manager's sharing, not chat or "
         "email"),
        ("set up short-lived credentials", "use OIDC federation so CI gets tokens that "
         "expire in minutes"),
    ], [
        ("a key was committed to git", "it was in a config file",
         "revoke the key first; rewriting history is not enough"),
        ("app fails after a secret rotation", "instances cached the old value",
         "reload secrets on change or restart instances in a rolling way"),
        ("secret visible in CI logs", "a script echoed the environment",
         "mask secrets in the CI settings and remove set -x"),
        ("too many people can read production secrets", "one shared vault policy",
         "grant per-service access and review it quarterly"),
        ("expired certificate took the site down", "renewal was manual",
         "automate renewal and alert thirty days before expiry"),
        ("environment file copied to a laptop", "developers use production values locally",
         "give development its own credentials"),
    ], [
        ("secret manager", "a service that stores, versions and audits secrets"),
        ("key rotation", "replacing a credential on a schedule or after exposure"),
        ("least privilege", "granting only the access a task needs"),
        ("envelope encryption", "encrypting data keys with a master key"),
        ("OIDC federation", "trading a workload identity for short-lived cloud credentials"),
        ("pre-commit hook", "a check that runs before a commit is recorded"),
    ]),
    Domain("support", "Support replies", [
        ("reply to an angry customer", "acknowledge the problem, apologize once, say what "
         "you will do and by when"),
        ("write a refund reply", "confirm the amount, the method and how many days it takes "
         "to arrive"),
        ("escalate a ticket", "summarize the issue, what was tried and the customer's "
         "deadline for the next team"),
        ("close a ticket politely", "confirm the fix, invite a reply if it comes back, and "
         "thank the customer"),
        ("reset a customer's password", "verify the identity, send a reset link and never "
         "send a password by email"),
        ("answer a feature request", "thank them, explain the current workaround and say how "
         "requests are prioritized"),
    ], [
        ("customer replies that the answer did not help", "the reply answered a different "
         "question", "restate their question before answering"),
        ("tickets reopened many times", "fixes were not confirmed with the customer",
         "ask them to confirm before closing"),
        ("slow first response time", "tickets wait unassigned", "route by topic and set a "
         "one-hour first-response target"),
        ("inconsistent answers across agents", "no shared macros", "keep reviewed reply "
         "templates in the help desk"),
        ("customer asks for a refund outside policy", "the policy is unclear to them",
         "explain the policy kindly and offer what is possible"),
        ("invoice cannot be downloaded", "the billing role is missing",
         "ask the account owner to grant the billing role"),
    ], [
        ("first response time", "how long a customer waits for the first human reply"),
        ("macro", "a saved reply an agent adapts to the ticket"),
        ("CSAT", "the customer satisfaction score asked after a ticket closes"),
        ("escalation", "passing a ticket to a team with more expertise or authority"),
        ("SLA", "the response and resolution times promised to a customer"),
        ("knowledge base", "the public articles customers can search themselves"),
    ]),
    Domain("odoo", "Odoo QWeb", [
        ("translate a QWeb template", "wrap text in the template, export the .pot with "
         "i18n export and fill the language's .po file"),
        ("override a QWeb report", "inherit the template with t-inherit and an xpath on the "
         "element to change"),
        ("add a field to an invoice report", "inherit the report template and insert a "
         "t-field after the existing line"),
        ("format dates in QWeb", "use t-options with widget date and the user's language"),
        ("debug a QWeb rendering error", "enable developer mode and read the traceback's "
         "template and line"),
        ("load translations after an update", "update the module with --i18n-overwrite or "
         "reload the language"),
    ], [
        ("translated text still shows in English", "the term is not in the .po file or the "
         "module was not updated", "export terms again and update the module"),
        ("xpath not found in an inherited view", "the parent template changed",
         "point the xpath at a stable element or use a named position"),
        ("report prints a blank page", "wkhtmltopdf cannot reach the server URL",
         "set report.url to an address the server can reach"),
        ("t-esc shows escaped HTML", "t-esc escapes on purpose", "use t-out with a Markup "
         "value for trusted HTML"),
        ("currency shown without symbol", "the monetary widget lacks display_currency",
         "pass display_currency in t-options"),
        ("translation breaks the layout", "the language's text is longer",
         "allow wrapping and test with the longest language"),
    ], [
        ("QWeb", "Odoo's XML templating engine for views and reports"),
        ("t-inherit", "the directive that extends another template"),
        ("t-field", "renders a record field with its widget and formatting"),
        (".po file", "a translation catalog with each source string and its translation"),
        ("xpath", "the expression that locates the element an inheritance changes"),
        ("report action", "the record that links a model to a printable template"),
    ]),
    Domain("review", "Code review", [
        ("review a pull request", "read the description first, then the tests, then the "
         "code, and comment on behaviour before style"),
        ("write a good pull request description", "say why, what changed, how it was tested "
         "and what reviewers should look at"),
        ("give constructive review comments", "ask questions, suggest code, and mark "
         "nitpicks as optional"),
        ("review a Dockerfile", "check the base image pin, the user, the layer order and "
         "that no secret is copied"),
        ("review a SQL migration", "check locks, backward compatibility and the rollback "
         "path"),
        ("keep pull requests small", "aim for under four hundred changed lines and one "
         "purpose each"),
    ], [
        ("reviews take days", "pull requests are large and unassigned",
         "assign reviewers automatically and split the work"),
        ("review comments feel personal", "they judge the author",
         "comment on the code and explain the reason"),
        ("bugs pass review", "reviewers skim the diff", "require tests for each change "
         "and read them first"),
        ("endless style debates", "no formatter", "adopt an automatic formatter and linter"),
        ("approved changes break main", "CI was not required", "protect main and require "
         "green CI before merging"),
        ("reviewer and author disagree", "no tie-break rule", "ask a third engineer and "
         "record the decision"),
    ], [
        ("nitpick", "a minor, optional suggestion"),
        ("LGTM", "looks good to me: approval"),
        ("code owner", "a person who must approve changes to certain files"),
        ("draft pull request", "work shared early, not ready to merge"),
        ("linter", "a tool that flags suspicious or non-conforming code"),
        ("merge queue", "a queue that tests each change on the latest main before merging"),
    ]),
    Domain("meetings", "Meetings and audits", [
        ("write meeting notes", "record decisions, action items with owners and open "
         "questions, and send them the same day"),
        ("run a system audit", "list hosts and services, check patch levels, open ports, "
         "users and backups"),
        ("prepare an agenda", "list topics with owners and times and share it a day ahead"),
        ("audit user access", "export accounts per system and remove those without a "
         "current owner"),
        ("review backups", "check the last successful run and restore one file as proof"),
        ("track action items", "put each in the team's tracker with an owner and a date"),
    ], [
        ("meetings end without decisions", "no decision maker was named",
         "name who decides in the agenda"),
        ("audit finds unpatched servers", "updates depend on a person",
         "enable unattended security updates"),
        ("action items forgotten", "they stayed in the notes", "copy them to the tracker"),
        ("audit takes weeks", "inventory is gathered by hand", "keep an automatic inventory"),
        ("notes disagree with what was said", "written days later",
         "write them during the meeting and share at once"),
        ("old accounts still active", "offboarding misses some systems",
         "use single sign-on and one offboarding checklist"),
    ], [
        ("action item", "a task from a meeting with an owner and a due date"),
        ("decision log", "the running record of decisions and their reasons"),
        ("inventory", "the list of systems, owners and versions an audit starts from"),
        ("patch level", "which updates a system has installed"),
        ("access review", "a periodic check that each account still needs its rights"),
        ("retention", "how long records are kept before deletion"),
    ]),
]


def articles() -> list[dict[str, str]]:
    """Every article, in a stable order, with stable ids."""
    out: list[dict[str, str]] = []
    for d in DOMAINS:
        for i, (task, steps) in enumerate(d.tasks, start=1):
            out.append({"_id": f"{d.slug}-howto-{i}", "title": f"How to {task}",
                        "text": f"{d.name}: to {task}, {steps}. If something goes wrong, "
                                "search the troubleshooting articles or open a ticket.",
                        "topic": d.slug})
            out.append({"_id": f"{d.slug}-checklist-{i}",
                        "title": f"Checklist: {task}",
                        "text": f"Before you {task}: make sure you have the access you need "
                                f"and a way back. Then {steps}. Afterwards, check the "
                                "result and tell the team what changed.",
                        "topic": d.slug})
        for i, (symptom, cause, fix) in enumerate(d.problems, start=1):
            out.append({"_id": f"{d.slug}-fix-{i}",
                        "title": f"{symptom[0].upper()}{symptom[1:]}",
                        "text": f"Symptom: {symptom}. Usual cause: {cause}. Fix: {fix}. "
                                f"This is a common {d.name} problem; if the fix does not "
                                "help, attach logs when you open a ticket.",
                        "topic": d.slug})
        for i, (term, meaning) in enumerate(d.terms, start=1):
            out.append({"_id": f"{d.slug}-term-{i}", "title": f"What is {term}?",
                        "text": f"In {d.name}, {term} means {meaning}.", "topic": d.slug})
    return out


def main() -> None:
    path = Path(__file__).with_name("corpus.jsonl")
    with path.open("w", encoding="utf-8") as f:
        for article in articles():
            f.write(json.dumps(article, ensure_ascii=False) + "\n")
    print(f"Wrote {len(articles())} articles to {path}")


if __name__ == "__main__":
    main()
