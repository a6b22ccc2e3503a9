"""Access policy: roles from the directory, deny by default, a reason for every answer, and every
decision in the ledger. Also the classification gate on integration assets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from governance import ledger
from governance.access.directory import FileDirectory
from governance.access.guard import authorize, run_identity
from governance.access.policy import (
    ADMIN_VERBS,
    VERIFIED_ALWAYS,
    VERIFIED_BY,
    Identity,
    Policy,
    Verb,
    coverage_problems,
    parse_classifications,
)
from governance.config import DEFAULT_TRANSFORM_PACKAGES
from governance.errors import AccessDenied, DirectoryUnavailable, InvalidInput
from governance.runs import Assurance
from governance.spec import Classification, Spec, check_specs
from governance.zones import AssetKey
from tests.conftest import DEMO_SPECS

INJECTIONS = ["*", "*)(uid=*", ")(|(cn=*", "alice)(|(uid=*)", "\\", "ali\x00ce", "alicé", "", "a" * 65]
CLIENTS, SUMMARY = "sales/clients", "sales/product_summary"


class DownDirectory:
    """A directory that cannot be asked, as LdapDirectory reports a server that is down."""

    def groups_of(self, user: str) -> frozenset[str]:
        raise DirectoryUnavailable(
            "directory ldap://localhost:1 could not be asked, so access is denied: LDAPSocketOpenError"
        )

    members_of = groups_of


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(FileDirectory.load(Path("assets/directory.yaml")))


def spec(demo_specs, name: str) -> Spec:
    return next(s for s in demo_specs if str(s.key) == name)


def who(user: str, assurance: Assurance = Assurance.ASSERTED) -> Identity:
    return Identity(user, assurance)


@pytest.mark.parametrize(
    ("user", "verb", "allowed"),
    [
        ("bob", Verb.INGEST, True),
        ("alice", Verb.INGEST, True),
        ("carol", Verb.INGEST, False),
        ("eve", Verb.INGEST, False),
        ("carol", Verb.READ, True),
        ("bob", Verb.READ, True),
        ("alice", Verb.READ, True),
        ("dave", Verb.READ, False),
        ("eve", Verb.READ, False),
        ("alice", Verb.GRANT, True),
        ("bob", Verb.GRANT, False),
        ("carol", Verb.REVOKE, False),
        ("alice", Verb.STATUS, True),
        ("bob", Verb.STATUS, False),
        ("nobody", Verb.READ, False),
    ],
)
def test_roles_decide_who_may_do_what(policy, demo_specs, user, verb, allowed):
    assert policy.decide(who(user, Assurance.VERIFIED), verb, spec(demo_specs, CLIENTS)).allowed is allowed


@pytest.mark.parametrize("verb", sorted(VERIFIED_ALWAYS))
@pytest.mark.parametrize("assurance", [Assurance.ASSERTED, Assurance.SYSTEM])
def test_changing_who_may_do_what_or_deleting_needs_a_verified_identity_whatever_the_roles(
    policy, demo_specs, verb, assurance
):
    target = None if verb in ADMIN_VERBS else spec(demo_specs, CLIENTS)
    denied = policy.decide(who("alice", assurance), verb, target)
    assert not denied.allowed
    assert denied.reason.endswith(
        f", but {VERIFIED_ALWAYS[verb]} needs a verified identity ({VERIFIED_BY}); alice's is {assurance}"
    )
    assert policy.decide(who("alice", Assurance.VERIFIED), verb, target).allowed


def test_an_allowed_decision_names_the_group_and_role(policy, demo_specs):
    decision = policy.decide(who("carol"), Verb.READ, spec(demo_specs, CLIENTS), version=2)
    assert decision.reason == "carol is in sales-consumers, consumer of sales/clients"
    assert (decision.role, decision.version, decision.result) == ("consumer", 2, "allowed")


def test_a_denial_names_the_roles_that_would_allow_it(policy, demo_specs):
    decision = policy.decide(who("eve"), Verb.INGEST, spec(demo_specs, CLIENTS))
    assert (
        decision.reason
        == "eve may not ingest sales/clients: it needs producer (sales-producers) or owner (sales-owners)"
    )


def test_purge_needs_the_admin_group(policy):
    assert policy.decide(who("alice", Assurance.VERIFIED), Verb.PURGE, None).allowed
    denied = policy.decide(who("bob"), Verb.PURGE, None)
    assert not denied.allowed and denied.reason == "bob may not purge: it needs the admin group custody-admins"


def test_an_asset_without_a_spec_is_denied_to_everyone(policy):
    assert not policy.decide(who("alice"), Verb.READ, None).allowed


def test_a_request_without_a_user_is_denied(policy, demo_specs):
    decision = policy.decide(Identity("anonymous", Assurance.NONE), Verb.INGEST, spec(demo_specs, CLIENTS))
    assert not decision.allowed and "names no user" in decision.reason


@pytest.mark.parametrize("name", INJECTIONS)
def test_names_that_could_widen_a_lookup_are_denied(policy, demo_specs, name):
    decision = policy.decide(who(name), Verb.READ, spec(demo_specs, CLIENTS))
    assert not decision.allowed and "invalid user name" in decision.reason


def test_a_directory_that_cannot_be_asked_denies(demo_specs):
    decision = Policy(DownDirectory()).decide(who("alice"), Verb.READ, spec(demo_specs, CLIENTS))
    assert not decision.allowed and "could not be asked, so access is denied" in decision.reason


def test_chosen_classifications_need_a_verified_identity(policy, demo_specs):
    strict = Policy(policy.directory, require_verified=frozenset({Classification.CONFIDENTIAL}))
    asserted = strict.decide(who("carol"), Verb.READ, spec(demo_specs, CLIENTS))
    assert not asserted.allowed and "needs a verified identity" in asserted.reason and "asserted" in asserted.reason
    assert strict.decide(who("carol", Assurance.VERIFIED), Verb.READ, spec(demo_specs, CLIENTS)).allowed
    assert strict.decide(who("bob"), Verb.INGEST, spec(demo_specs, "sales/products")).allowed


def test_the_verified_classifications_setting_is_parsed_and_checked():
    assert parse_classifications("restricted, confidential") == {Classification.RESTRICTED, Classification.CONFIDENTIAL}
    assert parse_classifications("none") == frozenset() == parse_classifications("")
    with pytest.raises(InvalidInput, match="CUSTODY_REQUIRE_VERIFIED='secret': unknown classification secret"):
        parse_classifications("secret")


def test_every_decision_is_in_the_ledger_with_result_reason_and_assurance(catalog, policy, demo_specs):
    authorize(catalog, policy, who("carol"), Verb.READ, spec(demo_specs, CLIENTS), version=1, run_id="r1")
    with pytest.raises(AccessDenied, match="denied: eve may not read sales/clients"):
        authorize(catalog, policy, who("eve"), Verb.READ, spec(demo_specs, CLIENTS), version=1)
    with catalog.session() as session:
        entries = ledger.entries(session, ledger.LedgerFilter(action="read"))
    assert [(e.actor, e.asset_key, e.version, e.assurance, json.loads(e.details)["result"]) for e in entries] == [
        ("carol", CLIENTS, 1, "asserted", "allowed"),
        ("eve", CLIENTS, 1, "asserted", "denied"),
    ]
    assert json.loads(entries[1].details)["reason"].startswith("eve may not read sales/clients")
    assert entries[0].run_id == "r1" and entries[0].ts


def test_a_refused_name_is_recorded_escaped(catalog, policy, demo_specs):
    with pytest.raises(AccessDenied, match="invalid user name"):
        authorize(catalog, policy, who("ali\x00ce"), Verb.READ, spec(demo_specs, CLIENTS))
    with catalog.session() as session:
        [entry] = ledger.entries(session, ledger.LedgerFilter(action="read"))
    assert entry.actor == "'ali\\x00ce'"


def test_a_purge_touching_a_restricted_asset_needs_a_verified_admin(policy, demo_specs):
    clients = spec(demo_specs, CLIENTS)
    restricted = Spec(
        clients.key, clients.file, clients.body.model_copy(update={"classification": Classification.RESTRICTED})
    )
    denied = policy.decide(who("alice"), Verb.PURGE, None, touching=[restricted])
    assert not denied.allowed and "sales/clients is restricted: purge needs a verified identity" in denied.reason
    assert policy.decide(who("alice", Assurance.VERIFIED), Verb.PURGE, None, touching=[restricted]).allowed
    assert not policy.decide(who("bob", Assurance.VERIFIED), Verb.PURGE, None, touching=[restricted]).allowed


def test_an_owner_cannot_change_a_group_that_also_serves_an_asset_they_do_not_own(catalog, tmp_path, demo_specs):
    from governance.access.grants import change_role
    from governance.access.policy import Role

    directory_file = tmp_path / "directory.yaml"
    directory_file.write_text(Path("assets/directory.yaml").read_text() + "  other-owners: [dave]\n")
    policy = Policy(FileDirectory.load(directory_file))
    products = spec(demo_specs, "sales/products")
    other = Spec(
        AssetKey("other", "ledger"),
        products.file,
        products.body.model_copy(update={"roles": products.body.roles.model_copy(update={"owner": "other-owners"})}),
    )
    with pytest.raises(
        AccessDenied, match="sales-consumers also holds a role on other/ledger, which alice does not own"
    ):
        change_role(
            catalog,
            policy,
            who("alice", Assurance.VERIFIED),
            Verb.GRANT,
            Role.CONSUMER,
            products,
            "eve",
            [*demo_specs, other],
        )
    assert policy.directory.groups_of("eve") == frozenset()
    with pytest.raises(AccessDenied, match="custody-admins is the admin group"):
        admins = Spec(
            products.key,
            products.file,
            products.body.model_copy(
                update={"roles": products.body.roles.model_copy(update={"producer": "custody-admins"})}
            ),
        )
        change_role(
            catalog, policy, who("alice", Assurance.VERIFIED), Verb.GRANT, Role.PRODUCER, admins, "eve", [admins]
        )
    with catalog.session() as session:
        assert [
            json.loads(e.details)["result"] for e in ledger.entries(session, ledger.LedgerFilter(action="grant"))
        ] == ["denied", "denied"]


def test_a_run_s_identity_is_asserted_by_its_tag_alone(catalog):
    assert run_identity(catalog, "run-1", "bob") == Identity("bob", Assurance.ASSERTED)
    assert run_identity(catalog, "run-1", None).assurance is Assurance.NONE


def test_a_run_tag_cannot_claim_a_verification_made_for_another_run(catalog):
    with catalog.session() as session:
        ledger.append(
            session,
            actor="bob",
            action="authenticate",
            run_id="run-1",
            assurance="verified",
            details={"result": "allowed"},
        )
    assert run_identity(catalog, "run-1", "bob").assurance is Assurance.VERIFIED
    assert run_identity(catalog, "run-2", "bob").assurance is Assurance.ASSERTED
    assert run_identity(catalog, "run-1", "alice").assurance is Assurance.ASSERTED


def test_ledger_show_action_matches_a_whole_family(catalog):
    with catalog.session() as session:
        for action in ("read", "ingestion.requested", "ingestion.committed", "ingest", "reads_other"):
            ledger.append(session, actor="bob", action=action)
    with catalog.session() as session:
        assert [e.action for e in ledger.entries(session, ledger.LedgerFilter(action="ingestion"))] == [
            "ingestion.requested",
            "ingestion.committed",
        ]
        assert [e.action for e in ledger.entries(session, ledger.LedgerFilter(action="read"))] == ["read"]


def copy_specs(tmp_path: Path) -> Path:
    root = tmp_path / "specs"
    shutil.copytree(DEMO_SPECS, root)
    return root


def test_an_integration_asset_classified_below_its_inputs_is_refused_naming_them(tmp_path):
    root = copy_specs(tmp_path)
    summary = root / "sales" / "product_summary.yaml"
    summary.write_text(summary.read_text().replace("classification: confidential", "classification: internal"))
    [problem] = check_specs(root, transform_packages=DEFAULT_TRANSFORM_PACKAGES)
    assert problem.field == "classification" and problem.file.endswith("product_summary.yaml")
    assert (
        problem.message
        == "internal is below its input(s) sales/names_and_products (confidential): classify it confidential or higher"
    )


def test_consumers_of_an_asset_must_all_be_consumers_of_its_pii_inputs(tmp_path, demo_specs):
    directory_file = tmp_path / "directory.yaml"
    directory_file.write_text(
        Path("assets/directory.yaml").read_text() + "  analysts: [carol, eve]\n  readers: [carol]\n"
    )
    directory = FileDirectory.load(directory_file)
    summary = spec(demo_specs, SUMMARY)
    inputs = [spec(demo_specs, "sales/names_and_products")]
    assert coverage_problems(summary, inputs, directory) == []

    def consumed_by(group: str) -> Spec:
        roles = summary.body.roles.model_copy(update={"consumer": group})
        return Spec(summary.key, summary.file, summary.body.model_copy(update={"roles": roles}))

    [problem] = coverage_problems(consumed_by("analysts"), inputs, directory)
    assert problem.field == "roles.consumer"
    assert (
        "analysts is not covered by sales-consumers, consumer group of sales/names_and_products (pii): eve could read"
        in problem.message
    )
    assert coverage_problems(consumed_by("readers"), inputs, directory) == []
