"""Click groups shared by the `kgqr` subcommands."""

from __future__ import annotations

import difflib

import click


class DefaultRunGroup(click.Group):
    """`kgqr X KIND:PATH ...` means `kgqr X run KIND:PATH ...`, so the main job of a group
    needs no verb while its helpers (status, sweep, ...) have one; so does `kgqr X --kb
    NAME KIND:PATH` (options first). A word close to a subcommand's name is click's "No
    such command ... Did you mean" (a mistyped `kgqr eval swep` ran `run` and asked for
    --kb)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        first = args[0] if args else None
        if first is not None and first not in self.commands and first not in ctx.help_option_names:
            mistyped = difflib.get_close_matches(first, list(self.commands), n=1, cutoff=0.75)
            if not mistyped:
                args = ["run", *args]
        return super().parse_args(ctx, args)
