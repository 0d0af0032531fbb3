"""Using a trained model (``asrkit.recognizer``): ``Recognizer.from_dir(model_dir)`` transcribes
and aligns audio with a model folder (``asrkit package``'s output); ``asrkit transcribe`` and
``asrkit align`` are thin commands over it. It sits above training, models and decoders and below
the command line (DESIGN.md). Names are imported lazily (see ``_EXPORTS``).
"""

from asrkit._lazy import lazy_exports

_EXPORTS = {
    "Recognizer": "asrkit.recognizer.recognizer",
    "RecognizerError": "asrkit.recognizer.options",
    "MIN_CHUNK_S": "asrkit.recognizer.options",
    "search_options": "asrkit.recognizer.options",
    "Result": "asrkit.recognizer.result",
    "Alignment": "asrkit.recognizer.result",
    "AlignedWord": "asrkit.recognizer.result",
    "WordTiming": "asrkit.recognizer.result",
    "ModelFolder": "asrkit.recognizer.model_folder",
    "ModelFolderError": "asrkit.recognizer.model_folder",
    "MANIFEST": "asrkit.recognizer.model_folder",
    "load_model_folder": "asrkit.recognizer.model_folder",
    "read_manifest": "asrkit.recognizer.model_folder",
    "package_model_folder": "asrkit.recognizer.package",
    "quiet_cuts": "asrkit.recognizer.chunks",
    "RecognizerStream": "asrkit.recognizer.stream",
    "StreamEvent": "asrkit.recognizer.stream",
    "StreamOptions": "asrkit.recognizer.stream",
    "model_stream": "asrkit.recognizer.model_stream",
    "load_hotwords": "asrkit.recognizer.hotwords",
    "score_exports": "asrkit.recognizer.exports",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
