"""An audit's plan: every key and value checked and every part built from the config, before any compute."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from privbench.attacks.base import Attack
from privbench.attacks.none import NoAttack
from privbench.audit.games import game_for
from privbench.audit.memory import check_memory, check_unrolled_steps, check_working_set, inversion_bytes
from privbench.build import build
from privbench.data import FederatedData
from privbench.data.photos import with_photos
from privbench.device import check_threads, make_deterministic
from privbench.device import resolve as resolve_device
from privbench.errors import AttackNotApplicableError, ConfigError, did_you_mean
from privbench.fl.engine import InProcess, Launcher
from privbench.fl.protocols import FederatedProtocol
from privbench.fl.protocols.cohort import Aggregation
from privbench.fl.sgd import local_steps
from privbench.fl.trainer import SGDTrainer, Trainer
from privbench.metrics.lpips_weights import alexnet_backbone
from privbench.metrics.reconstruction import MATCH_ON
from privbench.metrics.settings import METRIC_KEYS
from privbench.payloads.capture import CapturePolicy
from privbench.payloads.select import PayloadChoice
from privbench.payloads.transform import MessageTransform
from privbench.progress import phase
from privbench.values import check_values
from privbench.victim import Victim

GROUPS = ("data", "model", "fl", "payload", "attack", "defense", "aggregation", "engine")
TOP_KEYS = set(GROUPS) | {"name", "seed", "device", "victim", "capture", "metrics", "results_dir", "resume",
                          "allow_targets", "threads"}


@dataclass(frozen=True)
class Plan:
    """Everything built from the config before any data is loaded or model trained.

    Attributes:
        cfg: the resolved config.
        protocol: the federated protocol, holding its trainer.
        attack: the attack (``NoAttack`` for ``attack=none``).
        defense: the configured defence: the protocol's trainer, or the wire's transform.
        choice: which recorded payload is attacked.
        victim: the audited client.
        seed: the run's seed.
        device: where models, training and attacks run (payloads and states stay on the CPU).
        launcher: where the clients run (the ``engine`` group: this process, or Flower).
    """

    cfg: DictConfig
    protocol: FederatedProtocol
    attack: Attack
    defense: Trainer | MessageTransform
    choice: PayloadChoice
    victim: Victim
    seed: int
    device: torch.device = torch.device("cpu")
    launcher: Launcher = field(default_factory=InProcess)

    @property
    def attacking(self) -> bool:
        return not isinstance(self.attack, NoAttack)

    @property
    def transform(self) -> MessageTransform | None:
        """The message transform the wire applies to uplinks (None when the defence is a trainer)."""
        return self.defense if isinstance(self.defense, MessageTransform) else None


def _not_a(group: str, value: object, cls: type) -> ConfigError:
    return ConfigError(f"{group}: _target_ builds a {type(value).__name__}, not a {cls.__name__}")


def plan(cfg: DictConfig) -> Plan:
    """Check every key and value and build the parts; raise one-line errors, compute nothing."""
    _check_keys(cfg)
    victim = build("victim", OmegaConf.merge({"_target_": "privbench.victim.Victim"}, cfg.victim))
    defense = build("defense", cfg.defense, seed=int(cfg.seed))
    if not isinstance(defense, (Trainer, MessageTransform)):
        raise ConfigError(f"defense: {cfg.defense._target_} is neither a trainer nor a message transform")
    aggregation = build("aggregation", cfg.aggregation, seed=int(cfg.seed))
    if not isinstance(aggregation, Aggregation):
        raise _not_a("aggregation", aggregation, Aggregation)
    protocol = build("fl", cfg.fl, trainer=defense if isinstance(defense, Trainer) else SGDTrainer(),
                     aggregation=aggregation)
    attack = build("attack", cfg.attack)
    choice = build("payload", cfg.payload)
    if not isinstance(protocol, FederatedProtocol):
        raise _not_a("fl", protocol, FederatedProtocol)
    launcher = build("engine", cfg.engine)
    if not isinstance(launcher, Launcher):
        raise _not_a("engine", launcher, Launcher)
    if isinstance(defense, MessageTransform) and defense.encodes and aggregation.seals:
        raise ConfigError(f"defense={defense.name} with aggregation={aggregation.name}: SecAgg+ sums the masked "
                          "tensors themselves, and a compressed upload's parts do not add up; SecAgg+ quantises on "
                          "its own (aggregation.quantization_range)")
    problem = launcher.problem(protocol)
    if problem:
        raise ConfigError(f"engine={launcher.name}: {problem}")
    if getattr(aggregation, "agreed_download", False) and launcher.name != "inprocess":
        raise ConfigError(f"aggregation.agreed_download=true: engine={launcher.name} runs Flower's SecAggPlusWorkflow, "
                          "whose keys carry no download digest (the check runs on engine=inprocess)")
    if not isinstance(attack, Attack):
        raise _not_a("attack", attack, Attack)
    if not isinstance(choice, PayloadChoice):
        raise _not_a("payload", choice, PayloadChoice)
    assert isinstance(victim, Victim)
    device = resolve_device(str(cfg.get("device", "auto")))
    check_threads(cfg.get("threads", "auto"))
    p = Plan(cfg, protocol, attack, defense, choice, victim, int(cfg.seed), device, launcher)
    if p.attacking and victim.clients is not None and choice.spec.aggregate:
        raise ConfigError(f"victim.clients: payload={choice.kind} is one aggregate per cluster, not a message of "
                          "each client; audit aggregates with one victim (victim.clients=null)")
    if p.attacking:
        _check_attack(p)
    return p


def _check_keys(cfg: DictConfig) -> None:
    """Every group chosen, every value in range, no unknown top-level or metrics key, a known matching cost."""
    missing = [g for g in GROUPS if g not in cfg or cfg[g] is None]
    if missing:
        raise ConfigError(f"{missing[0]}: no {missing[0]} chosen (removed with ~{missing[0]}?); choose one with "
                          f"{missing[0]}=OPTION")
    check_values(cfg)
    unknown = sorted(set(cfg) - TOP_KEYS)
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown key{did_you_mean(unknown[0], TOP_KEYS)}; allowed top-level keys: "
                          f"{', '.join(sorted(TOP_KEYS))}")
    bad = sorted(set(cfg.metrics) - METRIC_KEYS)
    if bad:
        raise ConfigError(f"metrics.{bad[0]}: unknown key{did_you_mean(bad[0], METRIC_KEYS, prefix='metrics.')}; "
                          f"allowed keys: {', '.join(sorted(METRIC_KEYS))}")
    if cfg.metrics.match_on not in MATCH_ON:
        raise ConfigError(f"metrics.match_on={cfg.metrics.match_on!r}: allowed values: {', '.join(MATCH_ON)}")


def _check_attack(p: Plan) -> None:
    """The attack against what the run sends and the server sees: the payload, its kind, the defence, unrolling."""
    aggregation = p.protocol.aggregation
    if p.choice.kind not in p.protocol.wire_kinds:
        sends = ", ".join(p.protocol.wire_kinds) or "nothing (use attack=none)"
        under = "" if aggregation.name == "plain" else f" with aggregation={aggregation.name}"
        raise ConfigError(f"payload={p.choice.kind}: fl={p.protocol.name}{under} sends {sends}")
    if p.choice.kind not in p.protocol.readable_kinds:
        raise ConfigError(f"payload={p.choice.kind}: under aggregation={aggregation.name} the server never sees a "
                          f"client's {p.choice.kind}, only each cohort's mean; attack payload=aggregate")
    reason = p.attack.cannot_read(p.choice.kind)
    if reason:
        raise AttackNotApplicableError(f"attack={p.attack.name} cannot attack payload={p.choice.kind}: {reason}")
    reason = p.attack.cannot_face(clip=getattr(p.protocol.trainer, "clip_norm", None))
    if reason:
        raise AttackNotApplicableError(f"attack={p.attack.name} with defense={getattr(p.defense, 'name', 'dpsgd')}: "
                                       f"{reason}")
    if p.attack.unroll and p.choice.spec.carries != "model":
        raise AttackNotApplicableError(f"attack.unroll=true needs a payload that carries a model; "
                                       f"payload={p.choice.kind} carries a {p.choice.spec.carries}")
    _check_isolation(p)
    if p.cfg.metrics.lpips:
        alexnet_backbone()  # damaged weights fail here, not after training


def _check_isolation(p: Plan) -> None:
    """An active server that isolates a member needs a cohort aggregate, the in-process engine and a cohort larger
    than its sybils."""
    isolation = getattr(p.attack, "isolation", None)
    if isolation is not None and isolation.downloads == "per_client":
        if not getattr(p.attack, "per_member", False):
            raise ConfigError(f"attack.downloads=per_client: attack={p.attack.name} has no per-client downloads "
                              "(attack=loki sends each member its own)")
        slots = getattr(p.attack, "slots", 0)
        if p.launcher.name != "inprocess":
            raise ConfigError(f"attack={p.attack.name} sends each member its own download: engine={p.launcher.name} "
                              "sends every client the server's one model (per-client downloads run on "
                              "engine=inprocess)")
        if p.choice.spec.aggregate and slots < p.protocol.participants:
            raise ConfigError(f"attack.slots={slots}: a cohort of fl.participants={p.protocol.participants} needs "
                              "a slot for each member")
    if isolation is None or not isolation.isolates:
        return
    asked = ("attack.downloads=inconsistent" if isolation.downloads == "inconsistent"
             else f"attack.sybils={isolation.sybils}")
    if not p.choice.spec.aggregate:
        raise ConfigError(f"{asked} isolates the victim inside a cohort's aggregate; payload={p.choice.kind} is the "
                          "victim's own message already (use payload=aggregate)")
    if p.launcher.name != "inprocess":
        raise ConfigError(f"{asked}: engine={p.launcher.name} sends every client the server's one model; per-client "
                          "downloads and sybil clients run on engine=inprocess")
    if isolation.sybils and getattr(p.protocol, "num_clusters", 1) > 1:
        raise ConfigError(f"attack.sybils={isolation.sybils}: fl={p.protocol.name} aggregates per cluster, whose "
                          "cohorts are known only after clustering; sybil clients run on fl=fedavg (model "
                          "inconsistency, attack.downloads=inconsistent, runs on clustered protocols too)")
    if isolation.sybils > p.protocol.participants - 1:
        raise ConfigError(f"attack.sybils={isolation.sybils}: a cohort of fl.participants={p.protocol.participants} "
                          f"has at most {p.protocol.participants - 1} members besides the victim")


def prepare(p: Plan) -> tuple[FederatedData, nn.Module, CapturePolicy]:
    """Load the data, check the protocol and victim against it, build the model and the capture policy.

    Everything that can fail on the config fails here, before training.
    """
    cfg = p.cfg
    with phase("data"):
        data: FederatedData = build("data", cfg.data, seed=p.seed)
        if p.victim.photos is not None:
            data = with_photos(data, p.victim.client, p.victim.photos)
    if p.victim.data_size is not None:
        data = data.with_client_size(p.victim.client, p.victim.data_size, seed=p.seed)
    _check_photos(p, data)
    p.protocol.check(data=data, victim=p.victim)
    torch.manual_seed(p.seed)
    c, h, _ = data.train.shape
    model = build("model", cfg.model, in_channels=c, image_size=h, num_classes=data.train.num_classes)
    if not isinstance(model, nn.Module):
        raise _not_a("model", model, nn.Module)
    make_deterministic(p.device)
    model, data = model.to(p.device), data.to(p.device)
    p.protocol.trainer.check_model(model)
    p.protocol.check_model(model)
    if p.attacking:
        p.attack.check_model(model, tuple(data.train.shape))
    policy = build("capture", OmegaConf.merge({"_target_": "privbench.payloads.CapturePolicy.build"}, cfg.capture),
                   victim_round=p.victim.round, victim_client=p.victim.client)
    policy.check(sends=p.protocol.wire_kinds, rounds=p.protocol.rounds, clients=data.num_clients)
    p.protocol.plan_reads(data, p.victim)  # a DP trainer calibrates here: its accounting errors come before training
    _check_attack_size(p, data, model)
    if p.attacking:
        check_working_set(p.attack, model, tuple(data.train.shape))
    if p.attacking:
        game_for(p.attack.view).check(p, data, model, policy)
    return data, model, policy


def _check_photos(p: Plan, data: FederatedData) -> None:
    """With ``victim.photos``, the attack must rebuild images or count labels (a membership, source or property game
    would pair the photographs with the other domain's records: a test of the domain), and the chance baselines,
    drawn from the set's photographs the attack is not shown, need some left over."""
    if data.chance_pool is None:
        return
    if p.attacking and not game_for(p.attack.view).photographs:
        raise ConfigError(f"victim.photos={p.victim.photos}: attack={p.attack.name}'s {p.attack.view} game would set "
                          "the photographs against the other clients' records, a test of the domain; victim.photos "
                          "serves the attacks that rebuild or count the victim's images")
    held = len(data.clients[p.victim.client])
    attacked = held if p.victim.update_data == "all" else p.victim.num_images
    if attacked <= held and attacked >= len(data.chance_pool):  # a batch larger than the client's data: Victim says so
        raise ConfigError(f"victim.photos={p.victim.photos}: the attacked message would be computed from all "
                          f"{len(data.chance_pool)} photographs of the set, leaving none for the chance baselines "
                          "(drawn from the set's other photographs); lower victim.num_images, or set "
                          "victim.data_size with victim.update_data=all")


def _check_attack_size(p: Plan, data: FederatedData, model: nn.Module) -> None:
    """The images the attack rebuilds must fit ``attack.max_images``, an unrolled replay ``MAX_UNROLLED_STEPS``, and
    its restarts (and replayed steps) the machine's memory (``privbench.audit.memory``)."""
    max_images = getattr(p.attack, "max_images", None)
    if not p.attacking or max_images is None or p.choice.spec.aggregate:
        return
    images = p.victim.num_images
    if p.attack.unroll and p.victim.update_data == "all":
        images = len(data.clients[p.victim.client])
    if images > max_images:
        raise ConfigError(f"victim.num_images={p.victim.num_images}: the attack would rebuild {images} images, more "
                          f"than attack.max_images={max_images}")
    restarts = int(getattr(p.attack, "restarts", 1))
    victims = len(p.victim.listed) if p.victim.clients != "all" else p.protocol.participants
    sgd = getattr(p.protocol, "sgd", None)
    steps, batch = 1, images
    if p.attack.unroll and sgd is not None:
        batch = min(int(sgd.batch_size), images)
        steps = local_steps(images, epochs=int(sgd.epochs), batch_size=batch)
        check_unrolled_steps(steps, f"fl.local_epochs={sgd.epochs} fl.batch_size={sgd.batch_size}")
    estimate = inversion_bytes(problems=restarts * victims, images=images, image_shape=tuple(data.train.shape),
                               params=sum(t.numel() for t in model.parameters()), steps=steps, batch=batch)
    check_memory(estimate, f"attack.restarts={restarts}: {restarts} restarts x {victims} victims x {images} images"
                 + (f" x {steps} unrolled steps" if steps > 1 else ""))


def preflight(cfg: DictConfig) -> Plan:
    """Every check an audit makes before it trains (``plan`` and ``prepare``), and nothing more."""
    p = plan(cfg)
    prepare(p)
    return p
