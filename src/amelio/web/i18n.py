"""The dashboard's strings in English and French (the seeds are French).

The language comes from the ``ui_language`` setting, or the browser's
``Accept-Language`` when the setting is ``auto``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["FLASH_CODES", "LANGUAGES", "flash_text", "pick_language", "strings"]

LANGUAGES = ("en", "fr")

_EN = {
    "app": "Amelio",
    "skills": "Skills",
    "quality": "Quality",
    "learnings": "Learnings",
    "interactions": "Interactions",
    "login": "Log in",
    "logout": "Log out",
    "api_key": "API key",
    "login_help": "Paste an API key (amelio keys create).",
    "bad_key": "This key is not valid.",
    "client_key": "A client key only sends feedback events: log in with a bot or admin key.",
    "filter": "Filter skills",
    "project": "Project",
    "underperforming": "underperforming",
    "pending": "pending proposal",
    "content": "Content",
    "evals": "Evals",
    "evolution": "Evolution",
    "prs": "PRs",
    "rendered": "Rendered",
    "raw": "Raw",
    "version": "Version",
    "rule": "Rule",
    "severity": "Severity",
    "pass_rate": "Pass rate",
    "recent_failures": "Recent failures",
    "no_rules": "This skill has no eval rules.",
    "rollback": "Roll back to this version",
    "approve": "Approve",
    "reject": "Reject",
    "run_benchmark": "Run benchmark",
    "sage_analyze": "Sage analyze",
    "no_proposals": "No proposals.",
    "benchmark": "Benchmark",
    "wins": "wins",
    "losses": "losses",
    "ties": "ties",
    "verdict": "Verdict",
    "improvement": "Improvement",
    "confidence": "Confidence",
    "too_few_scenarios": "Not significant with {n} scenarios: run at least {m}.",
    "stopped_early": "Stopped after {n} of {m} scenarios: too many showed no difference "
    "for the rest to reach {c}%.",
    "pinned_kept": "Pinned cases: {n} of {m} checked, none newly fails a rule.",
    "pinned_regressed": "{k} of {n} pinned cases newly fail a rule under this proposal: "
    "it cannot pass (the scenarios alone said {v}).",
    "pinned_case": "Pinned case",
    "gain_interval": "Gain per scenario {d} (interval {lo} to {hi}), old {o} and new {n} "
    "out of 10.",
    "score_share": "The differences came {r}% from the rules and {j}% from the judge.",
    "judge_kappa": "Judge agreement with people: κ {k} over {n} pairs ({v} votes, {d} decisions).",
    "judge_kappa_unknown": "Judge agreement with people: {n} pairs ({v} votes, {d} "
    "decisions); κ needs {m} with both labels.",
    "noise_floor": "Noise floor {f}: the old version against itself, mean {m} over {n} "
    "scenarios; a PASSED needs the improvement's interval above it.",
    "judge_repeats": "{r} judge draws per order, agreeing in {a}% of them.",
    "held_out": "Replayed {r} of {p} logged messages (seed {s}) the proposal was not written "
    "from; {l} left out (it was written from {w} interactions).",
    "held_out_unknown": "Replayed {r} of {p} logged messages (seed {s}): which ones the "
    "proposal's author read is not recorded.",
    "correction": "Correction",
    "newly_failed": "Newly failed",
    "old": "Old",
    "new": "New",
    "reason": "Judge's reason",
    "no_benchmark": "No benchmark yet.",
    "show_report": "Show benchmark report",
    "rationale": "Rationale",
    "diff": "Diff",
    "success_rate": "Success rate",
    "feedback": "Feedback",
    # Answer feedback as glyphs every font has (no emoji font on many servers).
    "fb_up": "▲ up",
    "fb_down": "▼ down",
    "fb_fixit": "✎ fix it",
    "applied": "Uses",
    "last_report": "Last nightly report",
    "no_report": "No run yet.",
    "add": "Add",
    "retire": "Retire",
    "rule_text": "Rule",
    "skill": "Skill",
    "source": "Source",
    "message": "Message",
    "answer": "Answer",
    "prompt": "Prompt",
    "footnotes": "Footnotes",
    "none": "none",
    "started": "Started: refresh in a moment.",
    "saved": "Saved.",
    "all_projects": "all projects",
    "status": "Status",
    "select_skill": "Select a skill to see its content, rules, history and proposals.",
    "admin_only": "Only an admin can do this.",
    "when": "When",
    "who": "Who",
    "what": "What",
    "why": "Why",
    "changes": "changes",
    "new_skills": "New skills proposed",
    "search": "Search",
    "query": "Query",
    "rank_profile": "Rank profile",
    "search_help": "Rankings shown here are not logged as impressions: looking does not "
    "teach the search anything.",
    "results": "Results",
    "document": "Document",
    "score": "Score",
    "first_phase": "First phase",
    "feedback_score": "Feedback",
    "impressions": "Shown",
    "clicks": "clicks",
    "dwell_clicks": "Dwell ≥ 8 s",
    "bounces": "Bounces",
    "no_results": "No document matches.",
    "what_was_learned": "What search has learned",
    "corpus_size": "Documents",
    "signals_version": "Signals version",
    "examination": "Examination probability by rank (fitted position bias)",
    "busiest_queries": "Most clicked queries",
    "documents": "documents",
    "clicks_header": "Clicks",
    "pins_hides": "Pins / hides",
    "votes": "Votes + / −",
    "routing": "Routing",
    "cases": "Pinned cases",
    "cases_help": "Answers this skill must keep passing: every benchmark re-answers them with "
    "both versions, and a proposal under which one newly fails a rule cannot pass. A 👍 pins "
    "an answer, a Fix It pins its message with the correction, and `amelio cases pin` pins "
    "by hand.",
    "no_cases": "No pinned cases yet.",
    "unpin": "Unpin",
    "correction_or_note": "Correction or note",
    "case_unpinned": "Case {case} unpinned: benchmarks no longer check it.",
    "ref": "Ref",
    "remove": "Remove",
    "examples_help": "The messages the learned router learns this skill from: its SKILL.md "
    "examples (md1, md2…), then answers people kept and examples added here, "
    "newest first.",
    "no_examples": "No examples yet: answers people keep (voted up, evals passed) add them, and so "
    "can an admin, here.",
    "example_text": "Example message",
    "add_example": "Add example",
    "source_skill": "SKILL.md",
    "source_interaction": "kept answer",
    "source_manual": "added by hand",
    "skill_md_note": "Removing a SKILL.md example (md…) writes a new version of the skill.",
    "removed_examples": "{n} removed (kept, so the same answer is not learned again).",
    "suggest_triggers": "Suggest triggers",
    "suggest_help": "Mines the words and word pairs many of these examples use and few other "
    "skills' do, and proposes them as triggers and keywords for review.",
    "suggest_needs": "Suggesting triggers needs at least {m} examples.",
    "example_added": "Example {ref} added.",
    "example_removed": "Example {ref} removed.",
    "skill_example_removed": "SKILL.md example {ref} removed: the skill is now v{version}.",
    "no_such_example": "{ref} names no example of this skill.",
    "nothing_to_add": "Nothing to add: no word or pair is common in these examples and rare "
    "elsewhere.",
    "triggers_proposed": "Proposal #{id} filed.",
    "proposal_approved": "#{id} → v{version}",
    "proposal_rejected": "#{id} rejected.",
    "benchmark_started": "Benchmark started.",
    "unknown_action": "Unknown action.",
    "rolled_back": "v{version} → v{new}",
    "sage_started": "Sage started.",
    "learning_added": "Learning #{id} added.",
    "learning_merged": "Learning #{id}: the same rule was already there; merged.",
    "learning_kept": "Learning #{id}: the same rule is already there; kept.",
    "learning_reactivated": "Learning #{id}: a retired rule, active again.",
    "learning_retired": "Learning #{id} retired.",
    "learning_held": "Learning #{id} waits for review.",
    "learning_proposed": "Learning #{id} contradicts an active one: it waits for review.",
    "learning_approved": "Learning #{id} approved.",
    "learning_rejected": "Learning #{id} rejected.",
    "review_queue": "Waiting for review",
    "review_none": "Nothing waits for review.",
    "would_supersede": "Would supersede",
    "retire_proposal": "Retire proposal",
    "taught_by": "Taught by answer",
    "approve_edit": "Approve this wording",
    "reject_reason": "Why (optional)",
    "failed_forbidden": "Your key may not do this here.",
    "failed_not_found": "Not found: it was removed, or belongs to another skill or project.",
    "failed_conflict": "Not done: it conflicts with the current state (already decided, "
    "pending, or changed meanwhile). Reload the page and check.",
    "failed_invalid_input": "Not done: the form's input was refused (empty, too long or "
    "malformed).",
    "failed_llm_error": "Not done: the LLM could not answer (check the LLM settings, or try "
    "again later).",
    "failed": "Not done: the action failed.",
    "knowledge": "Knowledge",
    "notebook": "Notebook",
    "notebooks": "Notebooks",
    "sources": "Sources",
    "chunks": "Chunks",
    "last_sync": "Last sync",
    "pending_jobs": "Pending",
    "dead_letters": "Dead letters",
    "never": "never",
    "no_notebooks": "No notebook in this project yet: create one with `amelio knowledge "
    "create NAME` (or POST /v1/knowledge/notebooks), then sync sources into it.",
    "sync_worker": "Sync worker",
    "worker_running": "running",
    "worker_stopped": "stopped",
    "worker_off": "off (drain the queue with `amelio knowledge drain`)",
    "all_notebooks": "All notebooks",
    "question": "Question",
    "ask": "Ask",
    "ask_help": "Answers from this notebook's passages only, citing them as [1], [2]… "
    "Without an LLM the answer is extractive: the sentences that best match.",
    "mode_generated": "generated",
    "mode_extractive": "extractive",
    "llm_error": "The LLM did not answer",
    "citations": "Citations",
    "cited": "cited",
    "chunk": "chunk",
    "title": "Title",
    "kind": "Kind",
    "updated": "Updated",
    "synced": "Last synced",
    "no_sources": "No source synced yet.",
    "dead_letters_help": "Sources that failed every try. Retry puts one back in the queue "
    "with fresh tries.",
    "no_dead_letters": "No dead letters.",
    "tries": "Tries",
    "error": "Error",
    "failed_at": "Failed",
    "retry": "Retry",
    "retried": "Dead letter #{id} is back in the queue.",
    "not_dead_letter": "#{id} is not a dead letter of this notebook.",
    "contributions": "Contributions",
    "contributions_help": "Idle compute lent by browsers running amelio.js: they embed "
    "search documents that have no vector yet, and a result counts "
    "once two clients agree or the server's spot-check confirms it.",
    "contributions_on": "on",
    "contributions_off": "off (contributions = false)",
    "clients": "Clients",
    "tier": "Tier",
    "low_trust": "Low trust",
    "avg_trust": "Average trust",
    "cpu_seconds": "CPU-seconds given",
    "tasks_open": "Open",
    "tasks_leased": "Leased",
    "tasks_accepted": "Accepted",
    "tasks_cancelled": "Cancelled",
    "results_accepted": "Accepted results",
    "results_rejected": "Rejected results",
    "results_pending": "Pending results",
    "disagreements": "Disagreements",
    "spot_checks": "Spot-checks",
    "documents_embedded": "Documents embedded",
    "leases_total": "Leases (all time)",
    "no_clients": "No browser has contributed yet.",
}
_FR = {
    "skills": "Compétences",
    "quality": "Qualité",
    "learnings": "Apprentissages",
    "interactions": "Interactions",
    "login": "Se connecter",
    "logout": "Se déconnecter",
    "api_key": "Clé d'API",
    "login_help": "Collez une clé d'API (amelio keys create).",
    "bad_key": "Cette clé n'est pas valide.",
    "client_key": "Une clé client envoie seulement des événements de feedback : "
    "connectez-vous avec une clé bot ou admin.",
    "filter": "Filtrer les compétences",
    "project": "Projet",
    "underperforming": "sous-performante",
    "pending": "proposition en attente",
    "content": "Contenu",
    "evals": "Évaluations",
    "evolution": "Évolution",
    "prs": "Propositions",
    "rendered": "Rendu",
    "raw": "Brut",
    "version": "Version",
    "rule": "Règle",
    "severity": "Sévérité",
    "pass_rate": "Taux de réussite",
    "recent_failures": "Échecs récents",
    "no_rules": "Cette compétence n'a pas de règle d'évaluation.",
    "rollback": "Revenir à cette version",
    "approve": "Approuver",
    "reject": "Rejeter",
    "run_benchmark": "Lancer le benchmark",
    "sage_analyze": "Analyse Sage",
    "no_proposals": "Aucune proposition.",
    "benchmark": "Benchmark",
    "wins": "victoires",
    "losses": "défaites",
    "ties": "égalités",
    "verdict": "Verdict",
    "improvement": "Amélioration",
    "confidence": "Confiance",
    "old": "Ancien",
    "too_few_scenarios": "Non significatif avec {n} scénarios : lancez-en au moins {m}.",
    "stopped_early": "Arrêté après {n} scénarios sur {m} : trop n'ont montré aucune "
    "différence pour que la suite atteigne {c} %.",
    "pinned_kept": "Cas épinglés : {n} sur {m} vérifiés, aucun n'échoue à une nouvelle règle.",
    "pinned_regressed": "{k} cas épinglés sur {n} échouent à une règle avec cette proposition : "
    "elle ne peut pas passer (les scénarios seuls disaient {v}).",
    "pinned_case": "Cas épinglé",
    "gain_interval": "Gain par scénario {d} (intervalle {lo} à {hi}), ancien {o} et nouveau {n} "
    "sur 10.",
    "score_share": "Les écarts viennent à {r} % des règles et à {j} % du juge.",
    "judge_kappa": "Accord du juge avec les personnes : κ {k} sur {n} paires ({v} votes, "
    "{d} décisions).",
    "judge_kappa_unknown": "Accord du juge avec les personnes : {n} paires ({v} votes, {d} "
    "décisions) ; κ en demande {m} avec les deux étiquettes.",
    "noise_floor": "Plancher de bruit {f} : l'ancienne version contre elle-même, moyenne {m} "
    "sur {n} scénarios ; un PASSED exige que l'intervalle de l'amélioration le dépasse.",
    "judge_repeats": "{r} tirages du juge par ordre, concordants dans {a} % des cas.",
    "held_out": "{r} messages rejoués sur {p} (graine {s}) dont la proposition n'est pas "
    "issue ; {l} écartés (elle est issue de {w} interactions).",
    "held_out_unknown": "{r} messages rejoués sur {p} (graine {s}) : on ne sait pas lesquels "
    "l'auteur de la proposition a lus.",
    "correction": "Correction",
    "newly_failed": "Nouveaux échecs",
    "new": "Nouveau",
    "reason": "Raison du juge",
    "no_benchmark": "Pas encore de benchmark.",
    "show_report": "Voir le rapport de benchmark",
    "rationale": "Justification",
    "diff": "Différences",
    "success_rate": "Taux de succès",
    "feedback": "Retours",
    "fb_up": "▲ pour",
    "fb_down": "▼ contre",
    "fb_fixit": "✎ à corriger",
    "applied": "Utilisations",
    "last_report": "Dernier rapport nocturne",
    "no_report": "Pas encore d'exécution.",
    "add": "Ajouter",
    "retire": "Retirer",
    "rule_text": "Règle",
    "skill": "Compétence",
    "source": "Source",
    "message": "Message",
    "answer": "Réponse",
    "prompt": "Prompt",
    "footnotes": "Notes",
    "none": "aucune",
    "started": "Lancé : actualisez dans un instant.",
    "saved": "Enregistré.",
    "all_projects": "tous les projets",
    "status": "Statut",
    "select_skill": "Choisissez une compétence pour voir son contenu, ses règles, son "
    "historique et ses propositions.",
    "admin_only": "Réservé aux administrateurs.",
    "when": "Quand",
    "who": "Qui",
    "what": "Quoi",
    "why": "Pourquoi",
    "changes": "modifications",
    "new_skills": "Nouvelles compétences proposées",
    "search": "Recherche",
    "query": "Requête",
    "rank_profile": "Profil de classement",
    "search_help": "Les classements affichés ici ne sont pas journalisés comme "
    "impressions : regarder n'apprend rien à la recherche.",
    "results": "Résultats",
    "document": "Document",
    "score": "Score",
    "first_phase": "Première phase",
    "feedback_score": "Retours",
    "impressions": "Affiché",
    "clicks": "clics",
    "dwell_clicks": "Lecture ≥ 8 s",
    "bounces": "Rebonds",
    "no_results": "Aucun document ne correspond.",
    "what_was_learned": "Ce que la recherche a appris",
    "corpus_size": "Documents",
    "signals_version": "Version des signaux",
    "examination": "Probabilité d'examen par rang (biais de position estimé)",
    "busiest_queries": "Requêtes les plus cliquées",
    "documents": "documents",
    "clicks_header": "Clics",
    "pins_hides": "Épinglés / masqués",
    "votes": "Votes + / −",
    "routing": "Routage",
    "cases": "Cas épinglés",
    "cases_help": "Des réponses que cette compétence doit continuer à réussir : chaque "
    "benchmark les rejoue avec les deux versions, et une proposition qui en fait échouer une "
    "à une règle ne peut pas passer. Un 👍 épingle une réponse, un Fix It épingle son message "
    "avec la correction, et `amelio cases pin` épingle à la main.",
    "no_cases": "Aucun cas épinglé pour l'instant.",
    "unpin": "Désépingler",
    "correction_or_note": "Correction ou note",
    "case_unpinned": "Cas {case} désépinglé : les benchmarks ne le vérifient plus.",
    "ref": "Réf.",
    "remove": "Supprimer",
    "examples_help": "Les messages dont le routeur par apprentissage se sert pour reconnaître "
    "cette compétence : les exemples de son SKILL.md (md1, md2…), puis les "
    "réponses gardées et les exemples ajoutés ici, du plus récent au plus "
    "ancien.",
    "no_examples": "Pas encore d'exemple : les réponses gardées (votées pour, évaluations "
    "réussies) en ajoutent, et un administrateur peut en ajouter ici.",
    "example_text": "Message d'exemple",
    "add_example": "Ajouter l'exemple",
    "source_skill": "SKILL.md",
    "source_interaction": "réponse gardée",
    "source_manual": "ajouté à la main",
    "skill_md_note": "Supprimer un exemple du SKILL.md (md…) crée une nouvelle version de la "
    "compétence.",
    "removed_examples": "{n} supprimé(s) (conservés, pour que la même réponse ne soit pas "
    "réapprise).",
    "suggest_triggers": "Suggérer des déclencheurs",
    "suggest_help": "Cherche les mots et paires de mots que beaucoup de ces exemples emploient "
    "et peu d'exemples d'autres compétences, et les propose comme déclencheurs "
    "et mots-clés, à relire.",
    "suggest_needs": "Suggérer des déclencheurs demande au moins {m} exemples.",
    "example_added": "Exemple {ref} ajouté.",
    "example_removed": "Exemple {ref} supprimé.",
    "skill_example_removed": "Exemple {ref} du SKILL.md supprimé : la compétence est "
    "maintenant en v{version}.",
    "no_such_example": "{ref} ne désigne aucun exemple de cette compétence.",
    "nothing_to_add": "Rien à ajouter : aucun mot ni paire n'est fréquent dans ces exemples et "
    "rare ailleurs.",
    "triggers_proposed": "Proposition n° {id} créée.",
    "proposal_approved": "N° {id} → v{version}",
    "proposal_rejected": "N° {id} rejetée.",
    "benchmark_started": "Banc d'essai lancé.",
    "unknown_action": "Action inconnue.",
    "rolled_back": "v{version} → v{new}",
    "sage_started": "Sage est lancé.",
    "learning_added": "Leçon n° {id} ajoutée.",
    "learning_merged": "Leçon n° {id} : la même règle existait déjà ; fusionnée.",
    "learning_kept": "Leçon n° {id} : la même règle existe déjà ; conservée.",
    "learning_reactivated": "Leçon n° {id} : une règle retirée, de nouveau active.",
    "learning_retired": "Leçon n° {id} retirée.",
    "learning_held": "Leçon n° {id} en attente de relecture.",
    "learning_proposed": "Leçon n° {id} : contredit une leçon active ; en attente de relecture.",
    "learning_approved": "Leçon n° {id} approuvée.",
    "learning_rejected": "Leçon n° {id} rejetée.",
    "review_queue": "En attente de relecture",
    "review_none": "Rien n'attend de relecture.",
    "would_supersede": "Remplacerait",
    "retire_proposal": "Proposition de retrait",
    "taught_by": "Apprise de la réponse",
    "approve_edit": "Approuver cette formulation",
    "reject_reason": "Pourquoi (facultatif)",
    "failed_forbidden": "Votre clé ne permet pas cette action ici.",
    "failed_not_found": "Introuvable : supprimé, ou d'une autre compétence ou d'un autre projet.",
    "failed_conflict": "Non fait : cela contredit l'état actuel (déjà décidé, en attente, ou "
    "modifié entre-temps). Rechargez la page et vérifiez.",
    "failed_invalid_input": "Non fait : la saisie du formulaire est refusée (vide, trop longue "
    "ou mal formée).",
    "failed_llm_error": "Non fait : le LLM n'a pas pu répondre (vérifiez les réglages du LLM, "
    "ou réessayez plus tard).",
    "failed": "Non fait : l'action a échoué.",
    "knowledge": "Connaissances",
    "notebook": "Carnet",
    "notebooks": "Carnets",
    "sources": "Sources",
    "chunks": "Fragments",
    "last_sync": "Dernière synchronisation",
    "pending_jobs": "En attente",
    "dead_letters": "Lettres mortes",
    "never": "jamais",
    "no_notebooks": "Pas encore de carnet dans ce projet : créez-en un avec `amelio knowledge "
    "create NOM` (ou POST /v1/knowledge/notebooks), puis synchronisez-y des "
    "sources.",
    "sync_worker": "Synchronisation en arrière-plan",
    "worker_running": "en marche",
    "worker_stopped": "arrêtée",
    "worker_off": "désactivée (videz la file avec `amelio knowledge drain`)",
    "all_notebooks": "Tous les carnets",
    "question": "Question",
    "ask": "Demander",
    "ask_help": "Répond uniquement à partir des passages de ce carnet, en les citant [1], "
    "[2]… Sans LLM, la réponse est extractive : les phrases qui correspondent le "
    "mieux.",
    "mode_generated": "générée",
    "mode_extractive": "extractive",
    "llm_error": "Le LLM n'a pas répondu",
    "citations": "Citations",
    "cited": "citée",
    "chunk": "fragment",
    "title": "Titre",
    "kind": "Type",
    "updated": "Mise à jour",
    "synced": "Dernière synchronisation",
    "no_sources": "Aucune source synchronisée.",
    "dead_letters_help": "Les sources qui ont échoué à chaque essai. Réessayer en remet une "
    "dans la file, avec de nouveaux essais.",
    "no_dead_letters": "Aucune lettre morte.",
    "tries": "Essais",
    "error": "Erreur",
    "failed_at": "Échec",
    "retry": "Réessayer",
    "retried": "La lettre morte n° {id} est de retour dans la file.",
    "not_dead_letter": "N° {id} n'est pas une lettre morte de ce carnet.",
    "contributions": "Contributions",
    "contributions_help": "Calcul prêté par les navigateurs qui utilisent amelio.js quand ils "
    "sont inactifs : ils calculent les vecteurs des documents de "
    "recherche qui n'en ont pas encore, et un résultat compte quand "
    "deux clients concordent ou que la vérification du serveur le "
    "confirme.",
    "contributions_on": "activées",
    "contributions_off": "désactivées (contributions = false)",
    "clients": "Clients",
    "tier": "Niveau",
    "low_trust": "Confiance faible",
    "avg_trust": "Confiance moyenne",
    "cpu_seconds": "Secondes de CPU données",
    "tasks_open": "Ouvertes",
    "tasks_leased": "Prêtées",
    "tasks_accepted": "Acceptées",
    "tasks_cancelled": "Annulées",
    "results_accepted": "Résultats acceptés",
    "results_rejected": "Résultats rejetés",
    "results_pending": "Résultats en attente",
    "disagreements": "Désaccords",
    "spot_checks": "Vérifications du serveur",
    "documents_embedded": "Documents vectorisés",
    "leases_total": "Prêts (au total)",
    "no_clients": "Aucun navigateur n'a encore contribué.",
}


def pick_language(setting: str, accept_language: str | None) -> str:
    if setting in LANGUAGES:
        return setting
    for part in (accept_language or "").split(","):
        code = part.split(";")[0].strip().lower()[:2]
        if code in LANGUAGES:
            return code
    return "en"


def strings(language: str) -> dict[str, str]:
    """Every string in ``language``, falling back to English for any missing one."""
    return _EN | (_FR if language == "fr" else {})


#: The messages a dashboard page shows from its ``?msg=`` code: a page never shows
#: text from its address, so a link cannot put words on a trusted page.
FLASH_CODES = frozenset(
    {
        "case_unpinned",
        "example_added",
        "example_removed",
        "skill_example_removed",
        "nothing_to_add",
        "triggers_proposed",
        "retried",
        "not_dead_letter",
        "proposal_approved",
        "proposal_rejected",
        "benchmark_started",
        "unknown_action",
        "rolled_back",
        "sage_started",
        "learning_added",
        "learning_merged",
        "learning_kept",
        "learning_reactivated",
        "learning_retired",
        "learning_held",
        "learning_proposed",
        "learning_approved",
        "learning_rejected",
        "failed_forbidden",
        "failed_not_found",
        "failed_conflict",
        "failed_invalid_input",
        "failed_llm_error",
        "failed",
    }
)
#: A flash parameter: an id, a version or an example's ref (md3), nothing wordy.
_FLASH_VALUE = re.compile(r"[A-Za-z0-9]{1,20}")


def flash_text(t: Mapping[str, str], query: Mapping[str, str]) -> str | None:
    """The flash message for ``?msg=CODE&m_NAME=VALUE…``: a known code's string in
    ``t``, filled with its parameters when each is a short id; otherwise none."""
    code = query.get("msg")
    if code not in FLASH_CODES:
        return None
    params = {k[2:]: v for k, v in query.items() if k.startswith("m_")}
    if not all(_FLASH_VALUE.fullmatch(v) for v in params.values()):
        return None
    try:
        return t[code].format(**params)
    except (KeyError, IndexError, ValueError):  # a parameter missing from the address
        return None
