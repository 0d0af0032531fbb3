"""Train an acoustic model from a TOML config (CNTK-style sections: [network], [criterion],
[reader], [learner], [distributed], [train]; see data/conf/blstm_ctc.toml).

Writes OUT/final.mdl (the model: description + parameters, loadable with asrkit.models.load),
OUT/train_log.jsonl (one JSON record per line: step, kind train/cv, loss per frame, lr,
frames_per_s, cv_error), OUT/config.json and OUT/checkpoints/ckpt-<step>.npz.

Examples:
  asrkit train data/conf/blstm_ctc.toml --data data/train_fbank --out exp/blstm
  asrkit train conf.toml --set learner.lr=0.0005 --set train.epochs=20
  asrkit train conf.toml --out exp/blstm --resume          # continue from the last checkpoint
  mpiexec -n 4 asrkit train conf.toml                     # 4 data-parallel ranks, same config
"""

from __future__ import annotations

import json

from asrkit.cli.main import CommandError

COMMAND = "train"
HELP = "train an acoustic model from a TOML config (resumable, MPI data-parallel)"


def add_arguments(parser) -> None:
    """Arguments: CONFIG, --data, --cv-data, --tokens, --out, --resume, --set, --json."""
    parser.add_argument("config", help="training config (TOML)")
    parser.add_argument("--data", default=None, help="training data dir ([reader] data_dir)")
    parser.add_argument("--cv-data", default=None, help="CV data dir ([reader] cv_data_dir)")
    parser.add_argument("--tokens", default=None, help="tokens.txt ([reader] tokens)")
    parser.add_argument("--out", default=None, help="output folder ([train] out_dir)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the newest checkpoint in the output folder")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a config value (TOML syntax; repeatable)")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON summary (final CV figures, steps, paths) at the end")


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _check_blank(cfg, tokens, error) -> None:
    """``[criterion] blank`` must be an id of tokens.txt (-1: the table's own blank)."""
    blank = cfg.criterion.blank
    if blank >= len(tokens):
        raise error(f"{cfg.path}: [criterion].blank: {blank} is not a token id of "
                    f"{cfg.reader.tokens} (0..{len(tokens) - 1})")


def run(args) -> int:
    """Train; exit 0 when OUT/final.mdl was written (or max_steps stopped the run)."""
    import os

    from asrkit.config.acoustic_net import ConfigError
    from asrkit.distributed import abort_on_error, get_communicator
    from asrkit.io import DataDirError
    from asrkit.kernels import DeviceUnavailableError
    from asrkit.models import ArchiveError
    from asrkit.training import (
        ReaderError,
        TokenError,
        TokenTable,
        Trainer,
        TrainingError,
        load_train_config,
    )

    overrides = list(args.set)
    if args.cv_data:
        overrides.append(f"reader.cv_data_dir={_toml_str(args.cv_data)}")
    if args.tokens:
        overrides.append(f"reader.tokens={_toml_str(args.tokens)}")
    comm = get_communicator()
    expected = (ConfigError, ReaderError, TokenError, TrainingError, ArchiveError, OSError,
                DeviceUnavailableError, DataDirError)
    try:
        with abort_on_error(comm):
            cfg = load_train_config(args.config, overrides, data_dir=args.data,
                                    out_dir=args.out)
            if not cfg.reader.data_dir:
                raise ConfigError(f"{args.config}: [reader].data_dir is not set (or pass --data)")
            if not cfg.reader.tokens:
                raise ConfigError(f"{args.config}: [reader].tokens is not set (or pass --tokens); "
                                  "make one with: asrkit model tokens DATA_DIR tokens.txt")
            _check_blank(cfg, TokenTable.read(cfg.reader.tokens, cfg.reader.unit), ConfigError)
            trainer = Trainer(cfg, comm=comm)
            trainer.train(resume=args.resume)
            cv = trainer.evaluate() if args.json and trainer.cv_reader is not None else None
    except expected as e:
        if comm.size > 1:  # abort_on_error has already ended the job
            raise
        if isinstance(e, OSError) and e.filename is not None:
            raise CommandError(f"{e.filename}: {e.strerror or e}") from None
        raise CommandError(str(e)) from None
    if args.json and comm.is_main:
        final = os.path.join(cfg.train.out_dir, "final.mdl")
        print(json.dumps({"model": final if os.path.exists(final) else None,
                          "steps": trainer.step, "epochs": trainer.epoch,
                          "skipped_steps": trainer.skipped_steps,
                          "skipped_utterances": len(trainer.reader.problems),
                          "cv_loss": cv["loss"] if cv else None,
                          "cv_error": cv["cv_error"] if cv else None}, indent=2))
    return 0
