"""secagg-central-dp: clients clip (fixedclipping_mod), SecAgg+ hides each update, the server adds DP noise."""
