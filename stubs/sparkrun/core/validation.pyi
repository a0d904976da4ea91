class RecipeIssue:
    severity: str
    code: str
    summary: str
