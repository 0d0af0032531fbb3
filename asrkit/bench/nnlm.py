"""LSTM LM: asrkit's graph-engine model against the same network in torch, in one process.

Both sides hold the same weights (embedding -> LSTM -> affine -> log-softmax) and see the same
random Zipf-distributed sentences:

- ``score``: total log10 probability of every sentence, in length-sorted batches (asrkit:
  ``LstmLM.score_sentences``; torch: packed ``nn.LSTM`` under ``no_grad``). The extra gives the
  largest difference of the totals.
- ``train``: forward, backward and an Adam update (clipped) on bucketed minibatches (asrkit: the
  Trainer of ``asrkit.nnlm.fit``; torch: autograd and ``torch.optim.Adam``).
- ``step``: the decoder API, one word for ``--beam`` states at once (asrkit:
  ``next_logprobs`` on lazy states; torch: one ``nn.LSTM`` step and the output layer).

Torch is only the reference: without it the ratio column shows "-".
"""

from __future__ import annotations

import os

import numpy as np

from asrkit.bench import Case, median_time

NAME = "nnlm"
HELP = "LSTM LM scoring, training steps and decoder steps against the same network in torch"


def add_arguments(parser) -> None:
    """Model and data sizes, threads."""
    parser.add_argument("--sentences", type=int, default=256, help="sentences scored/trained")
    parser.add_argument("--vocab", type=int, default=2000, help="vocabulary size")
    parser.add_argument("--embed", type=int, default=128)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--max-len", type=int, default=30, help="longest sentence (words)")
    parser.add_argument("--batch", type=int, default=32, help="sentences per minibatch")
    parser.add_argument("--beam", type=int, default=16, help="states advanced per decoder step")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="torch intra-op threads")
    parser.add_argument("--seed", type=int, default=0)


def _data(args, rng):
    from asrkit.nnlm import LstmLM, Vocabulary

    words = [f"w{i}" for i in range(args.vocab - 3)]
    p = 1.0 / np.arange(1, len(words) + 1)
    p /= p.sum()
    lengths = rng.integers(1, args.max_len + 1, args.sentences)
    texts = [" ".join(rng.choice(words, n, p=p)) for n in lengths]
    lm = LstmLM.create(Vocabulary(["<unk>", "<s>", "</s>", *words]), args.embed, args.hidden,
                       args.layers, seed=args.seed)
    return lm, texts


class _TorchLM:
    """The same network in torch, with the asrkit model's weights."""

    def __init__(self, torch, lm):
        c = lm.config
        vals = {k: torch.from_numpy(v.copy()) for k, v in lm.network.values().items()}
        self.torch = torch
        self.emb = torch.nn.Embedding(c.vocab_size, c.embed_dim)
        self.rnn = torch.nn.LSTM(c.embed_dim, c.hidden_dim, c.num_layers)
        self.out = torch.nn.Linear(c.hidden_dim, c.vocab_size)
        with torch.no_grad():
            self.emb.weight.copy_(vals["embedding.E"])
            self.rnn.load_state_dict({k[5:]: v for k, v in vals.items() if k.startswith("lstm.")})
            self.out.weight.copy_(vals["output.W"].T)
            self.out.bias.copy_(vals["output.b"])
            self.out.bias[lm.bos_id] = -1e9
        self.params = [*self.emb.parameters(), *self.rnn.parameters(), *self.out.parameters()]

    def costs(self, words, targets, lengths):
        """Per-token -ln p ``[T, B]`` (zero on padding) of padded int arrays."""
        torch = self.torch
        x = self.emb(torch.from_numpy(words).long())
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.from_numpy(lengths).long(),
                                                         enforce_sorted=False)
        h, _ = self.rnn(packed)
        h, _ = torch.nn.utils.rnn.pad_packed_sequence(h, total_length=words.shape[0])
        logp = torch.log_softmax(self.out(h), -1)
        cost = -logp.gather(-1, torch.from_numpy(targets).long()[..., None])[..., 0]
        mask = torch.arange(words.shape[0])[:, None] < torch.from_numpy(lengths)[None, :]
        return cost * mask


def _batches(lm, texts, batch):
    from asrkit.nnlm.training import make_feeds

    ids = [lm.vocabulary.encode(t.split()) for t in texts]
    order = np.argsort([len(i) for i in ids], kind="stable")
    return [make_feeds([ids[k] for k in order[lo: lo + batch]], lm.bos_id, lm.eos_id)
            for lo in range(0, len(order), batch)]


def run(args) -> list[Case]:
    """Time scoring, training and decoder steps; returns three Cases."""
    try:
        import torch
    except ImportError:
        torch = None
    else:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    lm, texts = _data(args, rng)
    ref = _TorchLM(torch, lm) if torch is not None else None
    shape = f"V={args.vocab} E={args.embed} H={args.hidden} L={args.layers}"
    batches = _batches(lm, texts, args.batch)
    cases = []

    # -- score
    ours = lambda: lm.score_sentences(texts, batch_size=args.batch)
    extra = {}
    theirs_s = None
    if ref is not None:
        def theirs():
            with torch.no_grad():
                return [ref.costs(*b).sum(0).numpy() for b in batches]
        theirs_s = median_time(theirs, args.repeat)
        got = np.sort(ours())
        want = np.sort(-np.concatenate(theirs()) / np.log(10.0))
        extra["max_abs_diff_log10"] = f"{np.abs(got - want).max():.2e}"
    cases.append(Case(f"score {len(texts)} sentences {shape}", median_time(ours, args.repeat),
                      "torch", theirs_s, extra))

    # -- train steps
    from asrkit.learners import Adam, Trainer

    net = lm.network
    trainer = Trainer(net.cost, Adam(list(net.parameters.values()), 1e-3, clip_norm=5.0))

    def ours_train():
        for w, t, L in batches:
            trainer.train_minibatch({net.words: (w, L), net.targets: (t, L)})

    theirs_s = None
    if ref is not None:
        opt = torch.optim.Adam(ref.params, 1e-3)

        def theirs_train():
            for w, t, L in batches:
                opt.zero_grad()
                loss = ref.costs(w, t, L).sum() / float(L.sum())
                loss.backward()
                torch.nn.utils.clip_grad_norm_(ref.params, 5.0)
                opt.step()
        theirs_s = median_time(theirs_train, args.repeat)
    tokens = int(sum(b[2].sum() for b in batches))
    cases.append(Case(f"train {len(batches)} minibatches ({tokens} tokens)",
                      median_time(ours_train, args.repeat), "torch", theirs_s))
    lm.parameters_changed()

    # -- decoder steps: advance `beam` states by one word, 20 times
    words = rng.integers(3, len(lm.vocab), (20, args.beam))

    def ours_step():
        states = [lm.begin_state()] * args.beam
        for row in words:
            lm.next_logprobs(states)
            states = [lm.score_id(s, int(w))[1] for s, w in zip(states, row)]
        return lm.next_logprobs(states)

    theirs_s = None
    if ref is not None:
        def theirs_step():
            with torch.no_grad():
                state = None
                x = torch.full((1, args.beam), lm.bos_id, dtype=torch.long)
                for row in [*words, None]:
                    h, state = ref.rnn(ref.emb(x), state)
                    logp = torch.log_softmax(ref.out(h[0]), -1)
                    if row is not None:
                        x = torch.from_numpy(row)[None, :]
                return logp
        theirs_s = median_time(theirs_step, args.repeat)
    cases.append(Case(f"decoder steps 20 x beam {args.beam}", median_time(ours_step,
                                                                          args.repeat),
                      "torch", theirs_s))
    return cases
