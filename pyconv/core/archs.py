"""The course's networks, one per semester, as pyconv.model layer lists (without weights).

Every one: convolution valid, stride 1, no bias; an activation; max-pooling; fully connected with bias; softmax
last. The input is one grey channel of raw 0..255 pixels at the architecture's size (Fashion-MNIST resized).

    arch  input  layers
    fa17  28x28  conv 50@5x5 -> tanh -> pool 2 -> FC 500 -> tanh -> FC 10
    sp18  64x64  conv 6@5x5 -> tanh -> pool 2 -> conv 16@5x5 -> FC 140 -> tanh -> FC 10
    fa18  72x72  conv 12@7x7 -> tanh -> pool 2 -> conv 24@7x7 -> FC 160 -> tanh -> FC 10
    sp19  48x48  conv 6@5x5 -> tanh -> pool 2 -> conv 16@5x5 -> FC 140 -> tanh -> FC 10
    fa19  70x70  conv 12@5x5 -> tanh -> pool 2 -> conv 24@5x5 -> FC 160 -> tanh -> FC 10
    fa20  86x86  conv 4@7x7 -> relu -> pool 2 -> conv 16@7x7 -> relu -> pool 4 -> FC 32 -> relu -> FC 10
(sp18, fa18, sp19 and fa19 have no activation or pooling after their second convolution: the course's networks went
straight from conv2 to the flatten. fa20 is the Mini-DNN editions' network, Fall 2020 on: the course's
ece408net.cc, 86 -> conv 80 -> pool 40 -> conv 34 -> pool 8, 16 x 8 x 8 = 1024 features.)"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import PyconvError
from .model import Layer, Model


@dataclass(frozen=True)
class Arch:
    name: str
    semester: str
    input_size: int
    convs: tuple[tuple[int, int], ...]  # (out_channels, kernel) per conv layer
    hidden: int  # width of the hidden fully connected layer
    pools: tuple[int, ...] = (2,)  # max-pool window (= stride) after each conv layer; missing or 0: none
    activation: str = "tanh"  # after each pooled conv layer and the hidden fully connected layer
    classes: int = 10

    def pool_after(self, conv_index: int) -> int:
        """The max-pool window after conv layer `conv_index` (0-based), 0 for none."""
        return self.pools[conv_index] if conv_index < len(self.pools) else 0

    @property
    def pool_after_conv2(self) -> bool:
        return self.pool_after(1) > 0


ARCHS: dict[str, Arch] = {
    "fa17": Arch("fa17", "Fall 2017", 28, ((50, 5),), 500),
    "sp18": Arch("sp18", "Spring 2018", 64, ((6, 5), (16, 5)), 140),
    "fa18": Arch("fa18", "Fall 2018", 72, ((12, 7), (24, 7)), 160),
    "sp19": Arch("sp19", "Spring 2019", 48, ((6, 5), (16, 5)), 140),
    "fa19": Arch("fa19", "Fall 2019", 70, ((12, 5), (24, 5)), 160),
    "fa20": Arch("fa20", "Fall 2020 on (Mini-DNN)", 86, ((4, 7), (16, 7)), 32, pools=(2, 4), activation="relu"),
}


def get_arch(name: str) -> Arch:
    try:
        return ARCHS[name]
    except KeyError:
        raise PyconvError(f"unknown architecture '{name}' (known: {', '.join(ARCHS)})") from None


def layers(name: str) -> list[Layer]:
    """The layer list of architecture `name` (weights None): per conv layer conv [-> activation -> max-pool],
    then flatten -> fc1 -> activation -> fc2 -> softmax."""
    arch = get_arch(name)
    out: list[Layer] = []
    for i, (channels, kernel) in enumerate(arch.convs):
        out.append(Layer(type="conv", name=f"conv{i + 1}", out_channels=channels, kernel=kernel))
        if window := arch.pool_after(i):
            out += [Layer(type=arch.activation), Layer(type="pool", mode="max", kernel=window, stride=window)]
    out += [Layer(type="flatten"),
            Layer(type="fc", name="fc1", out_features=arch.hidden), Layer(type=arch.activation),
            Layer(type="fc", name="fc2", out_features=arch.classes), Layer(type="softmax")]
    return out


def empty_model(arch_name: str, name: str, description: str = "") -> Model:
    """A Model of architecture `arch_name` whose weights are still to be filled in (e.g. by the trainer)."""
    arch = get_arch(arch_name)
    return Model(name=name, arch=arch.name, input_shape=(1, arch.input_size, arch.input_size),
                 layers=layers(arch_name), description=description)
