"""A product catalogue with real size, in the spirit of STaRK-Amazon: products, brands,
categories and countries, typed relations between them, and free text in which the
features a question may ask for are written (so text and relations both matter).

Deterministic for a seed: the same arguments write byte-identical files, so the test KB
never has to be checked in. Written in the generic JSONL layout (ingest/sources/jsonl.py).
"""

from __future__ import annotations

import random

from ingest.generators.kb_files import GeneratedKb, Syllables

COUNTRIES = (
    "Norway", "Sweden", "Finland", "Denmark", "Iceland", "Germany", "Austria", "Switzerland",
    "France", "Belgium", "Netherlands", "Spain", "Portugal", "Italy", "Greece", "Poland",
    "Czechia", "Hungary", "Romania", "Ireland", "Scotland", "Canada", "Mexico", "Brazil",
    "Chile", "Argentina", "Peru", "Japan", "Korea", "Vietnam", "Thailand", "India",
    "Kenya", "Morocco", "Egypt", "Turkey", "Australia", "New Zealand", "Estonia", "Latvia",
)  # fmt: skip

# family -> (subcategories, features a product of the family may have)
FAMILIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "Footwear": (
        ("hiking boot", "trail running shoe", "sandal", "rain boot", "climbing shoe",
         "sneaker", "winter boot", "slipper", "loafer", "ski boot"),
        ("waterproof", "breathable", "insulated", "lightweight", "vegan leather",
         "wide fit", "slip resistant", "recycled rubber sole", "quick lacing", "cushioned"),
    ),
    "Outdoor": (
        ("tent", "sleeping bag", "backpack", "trekking pole", "headlamp", "camp stove",
         "hammock", "water filter", "rain jacket", "compass"),
        ("ultralight", "waterproof", "packable", "windproof", "solar powered", "four season",
         "insulated", "reflective", "recycled nylon", "self inflating"),
    ),
    "Kitchen": (
        ("chef knife", "frying pan", "dutch oven", "blender", "kettle", "coffee grinder",
         "cutting board", "stand mixer", "toaster", "rice cooker"),
        ("dishwasher safe", "cast iron", "stainless steel", "nonstick", "cordless",
         "induction ready", "bamboo", "bpa free", "programmable", "ceramic coated"),
    ),
    "Audio": (
        ("headphones", "earbuds", "bookshelf speaker", "soundbar", "turntable",
         "microphone", "portable speaker", "amplifier", "subwoofer", "radio"),
        ("wireless", "noise cancelling", "waterproof", "bluetooth", "hi res",
         "long battery", "foldable", "usb c", "voice assistant", "studio grade"),
    ),
    "Home": (
        ("desk lamp", "office chair", "bookshelf", "rug", "curtain", "duvet", "pillow",
         "air purifier", "humidifier", "wall clock"),
        ("dimmable", "ergonomic", "solid oak", "washable", "blackout", "hypoallergenic",
         "smart", "quiet", "handwoven", "energy saving"),
    ),
    "Sports": (
        ("yoga mat", "dumbbell", "bicycle helmet", "tennis racket", "swim goggles",
         "jump rope", "kettlebell", "football", "skateboard", "rowing machine"),
        ("non slip", "adjustable", "foldable", "anti fog", "carbon fiber", "eco friendly",
         "heavy duty", "ventilated", "beginner friendly", "competition grade"),
    ),
    "Toys": (
        ("puzzle", "building blocks", "board game", "plush bear", "model train",
         "kite", "doll house", "science kit", "remote car", "wooden railway"),
        ("educational", "wooden", "battery free", "glow in the dark", "collectible",
         "two player", "magnetic", "recyclable", "handmade", "award winning"),
    ),
    "Garden": (
        ("lawn mower", "garden hose", "pruning shears", "planter", "bird feeder",
         "leaf blower", "wheelbarrow", "watering can", "greenhouse", "compost bin"),
        ("cordless", "rust proof", "self watering", "expandable", "frost resistant",
         "ergonomic", "recycled plastic", "quiet", "foldable", "galvanized"),
    ),
}  # fmt: skip

COLOURS = ("black", "white", "red", "blue", "green", "grey", "orange", "yellow", "brown")
MATERIALS = ("aluminium", "steel", "cotton", "wool", "oak", "plastic", "leather", "glass")
LINES = Syllables(("al", "ve", "ko", "ri", "sta", "nor", "bel", "tu", "mar", "qi", "zen", "lo"))
BRANDS = Syllables(("var", "nok", "tes", "ly", "ord", "ax", "hel", "um", "bri", "do", "kel",
                    "sa", "vik", "or", "pen", "ta", "ru", "gen", "fi", "lux"))  # fmt: skip


def catalog(documents: int = 20_000, seed: int = 7) -> GeneratedKb:
    """About `documents` documents: 4% brands, the families' subcategories and the
    countries, products for the rest; roughly 5.5 relations per product."""
    rng = random.Random(seed)
    kb = GeneratedKb(
        types={
            "product": ["price", "rating", "year", "colour", "material"],
            "brand": ["founded"],
            "category": [],
            "country": [],
        },
        relations=["made_by", "in_category", "based_in", "subcategory_of", "compatible_with",
                   "bought_with"],
    )  # fmt: skip
    for number, country in enumerate(COUNTRIES):
        kb.document(f"country-{number}", "country", country, f"{country} is a country.")
    categories: list[tuple[str, str, tuple[str, ...]]] = []
    for family, (subcategories, features) in FAMILIES.items():
        family_id = f"category-{family.lower()}"
        kb.document(family_id, "category", family, f"{family}: products for {family.lower()}.")
        for sub in subcategories:
            sub_id = f"category-{sub.replace(' ', '-')}"
            kb.document(sub_id, "category", sub.capitalize(), f"{sub.capitalize()}s ({family}).")
            kb.relation(sub_id, "subcategory_of", family_id)
            categories.append((sub_id, sub, features))
    brand_count = max(documents // 25, 10)
    brands = []
    for number, name in enumerate(BRANDS.names(rng, brand_count)):
        brand_id = f"brand-{number}"
        home_country = rng.randrange(len(COUNTRIES))
        founded = rng.randint(1920, 2020)
        family = rng.choice(list(FAMILIES))
        kb.document(
            brand_id, "brand", name,
            f"{name} is a maker of {family.lower()} goods, founded in {founded} in "
            f"{COUNTRIES[home_country]}.",
            {"founded": founded},
        )  # fmt: skip
        kb.relation(brand_id, "based_in", f"country-{home_country}")
        # A brand makes mostly one family's products, like real ones.
        home = [c for c in categories if c[2] is FAMILIES[family][1]]
        brands.append((brand_id, home))
    products = documents - len(kb.documents)
    product_ids = [f"product-{n}" for n in range(products)]
    lines = LINES.names(rng, 300)
    for product_id in product_ids:
        brand_id, home = rng.choice(brands)
        category_id, noun, features = rng.choice(home if rng.random() < 0.8 else categories)
        chosen = rng.sample(features, rng.randint(1, 3))
        fields = {
            "price": round(rng.lognormvariate(3.8, 0.8), 2),
            "rating": round(rng.uniform(1.5, 5.0), 1),
            "year": rng.randint(2005, 2025),
            "colour": rng.choice(COLOURS),
            "material": rng.choice(MATERIALS),
        }
        # The brand is a relation, not a word of the text: "products by X" needs the graph.
        title = f"{rng.choice(lines)} {noun}"
        text = (
            f"{title}: a {', '.join(chosen)} {noun} in {fields['colour']} {fields['material']}. "
            f"Released in {fields['year']}, rated {fields['rating']} of 5."
        )
        kb.document(product_id, "product", title, text, fields)
        kb.relation(product_id, "made_by", brand_id)
        kb.relation(product_id, "in_category", category_id)
    for product_id in product_ids:
        for other in rng.sample(product_ids, rng.choice((1, 2, 3, 4))):
            if other != product_id:
                kb.relation(product_id, "compatible_with", other)
        kb.relation(product_id, "bought_with", rng.choice(product_ids))
    return kb
