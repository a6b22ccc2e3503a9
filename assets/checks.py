"""Custody's checks of each version as Dagster asset checks: one op for every asset, run after each
materialization and on demand from the UI."""

# No `from __future__ import annotations` here: Dagster reads the check function's annotations at runtime.

from collections.abc import Iterator

import dagster as dg

from governance.checks import DESCRIPTIONS, Check, checks_for
from governance.errors import NotFound
from governance.spec import SpecSet
from governance.zones import AssetKey
from resources import CustodyResource


AUDIT_CONFIG = {"version": dg.Field(dg.Noneable(int), default_value=None,
                                    description="The version to check; by default the one the run made, else the newest.")}


def build_checks(specs: SpecSet) -> dg.AssetChecksDefinition:
    check_specs = [
        dg.AssetCheckSpec(check.value, asset=dg.AssetKey([spec.key.domain, spec.key.name]), description=DESCRIPTIONS[check])
        for spec in specs for check in checks_for(spec)
    ]

    @dg.multi_asset_check(specs=check_specs, can_subset=True, name="custody_checks",
                          required_resource_keys={"custody"}, config_schema=AUDIT_CONFIG)
    def custody_checks(context: dg.AssetCheckExecutionContext) -> Iterator[dg.AssetCheckResult]:
        from governance.audit import audit, version_to_audit

        custody: CustodyResource = context.resources.custody
        by_asset: dict[dg.AssetKey, list[Check]] = {}
        for check_key in context.selected_asset_check_keys:
            by_asset.setdefault(check_key.asset_key, []).append(Check(check_key.name))
        for asset_key, checks in sorted(by_asset.items(), key=lambda item: item[0].to_user_string()):
            spec = specs[AssetKey(*asset_key.path)]
            try:
                version = version_to_audit(custody.catalog, spec, context.run.run_id, context.op_execution_context.op_config["version"])
            except NotFound as err:
                for check in checks:
                    yield dg.AssetCheckResult(asset_key=asset_key, check_name=check.value, passed=False, description=str(err))
                continue
            findings = audit(custody.catalog, spec, version, tuple(checks))
            for finding in findings:
                if not finding.passed:
                    context.log.warning(f"{finding.check} failed: {finding.description}")
            context.log.info(f"{version.ref}: {sum(f.passed for f in findings)} of {len(findings)} checks passed")
            for finding in findings:
                yield dg.AssetCheckResult(
                    asset_key=asset_key, check_name=finding.check.value, passed=finding.passed,
                    description=finding.description,
                    metadata={"custody/version": version.ref, **finding.metadata},
                )

    return custody_checks
