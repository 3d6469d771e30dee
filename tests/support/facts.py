"""What a user tells the in-memory stack in the stage tests: facts on unrelated subjects, so
that a question about one of them finds that one."""

FACTS = ("The user is allergic to peanuts.",
         "The user's sister plays the violin in an orchestra.",
         "The user works as a nurse at a hospital in Oslo.",
         "The user drives an old red Volvo to work.",
         "The user's favourite dish is mushroom risotto.")
# The tests of working memory tell a sixth, about what the user eats.
FACTS_WITH_DIET = (*FACTS, "The user has been vegetarian since 2019.")
