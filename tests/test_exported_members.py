from __future__ import annotations

import veil


def test_all_names_exist_and_nothing_private_is_exported() -> None:
    for name in veil.__all__:
        assert hasattr(veil, name), name
        assert not name.startswith("_") or name == "__version__"


def test_public_surface_is_exactly_all() -> None:
    public = {n for n in dir(veil) if not n.startswith("_")}
    submodules = {n for n in public if type(getattr(veil, n)).__name__ == "module"}
    assert public - submodules == set(veil.__all__) - {"__version__"}


def test_perturb_stays_the_function_once_its_module_is_imported() -> None:
    import veil.local.perturb
    import veil.perturbation  # the deprecated path, a re-export for one release

    assert veil.perturb is veil.local.perturb.perturb
    assert veil.perturb is veil.perturbation.perturb
    assert callable(veil.perturb)
