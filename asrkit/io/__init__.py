"""Data I/O (``asrkit.io``): audio files, Kaldi data directories, Kaldi ark/scp tables, and
feature-extraction configs.

- ``load_audio`` / ``save_audio``: soundfile-backed audio, float or int16 scale (Kaldi parity);
- ``DataDir``, ``validate_data_dir``, ``fix_data_dir``: Kaldi data directories;
- ``read_table``, ``read_table_entries``, ``TableWriter``, ``RandomAccessTable``: Kaldi archives
  and script files (compressed matrices included);
- ``pipe_timeout``, ``set_pipe_timeout``: the time limit of ``cmd |`` pipes;
- ``load_feature_config``: the TOML configs of ``asrkit compute-features``;
- ``TokenTable``: ``tokens.txt``, the model's output units (training, model folders, graphs).
"""

from asrkit.io.audio import AudioError, audio_info, load_audio, save_audio
from asrkit.io.datadir import (
    DataDir,
    DataDirError,
    FixReport,
    Problem,
    Utterance,
    fix_data_dir,
    split_evenly,
    validate_data_dir,
)
from asrkit.io.feature_config import (
    ConfigError,
    FeatureConfig,
    load_feature_config,
    parse_feature_config,
)
from asrkit.io.kaldi_tables import (
    RandomAccessTable,
    TableEntry,
    TableError,
    TableWriter,
    read_rxfilename,
    read_script,
    read_table,
    read_table_dict,
    read_table_entries,
    read_value,
    write_script,
    write_table,
    write_value,
)
from asrkit.io.pipes import PipeError, pipe_timeout, set_pipe_timeout
from asrkit.io.tokens import TokenError, TokenTable, make_token_table
from asrkit.io.wavscp import load_rxfilename, read_rxfilename_bytes

__all__ = [
    "AudioError", "ConfigError", "DataDir", "DataDirError", "FeatureConfig", "FixReport",
    "PipeError", "Problem", "RandomAccessTable", "TableEntry", "TableError", "TableWriter",
    "TokenError", "TokenTable",
    "Utterance", "audio_info",
    "fix_data_dir", "load_audio", "load_feature_config", "load_rxfilename", "make_token_table",
    "parse_feature_config", "pipe_timeout", "read_rxfilename", "read_rxfilename_bytes",
    "read_script", "read_table", "read_table_dict", "read_table_entries", "read_value",
    "save_audio", "set_pipe_timeout", "split_evenly",
    "validate_data_dir", "write_script", "write_table", "write_value",
]
