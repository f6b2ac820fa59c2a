import { validateToken } from "./auth";

if (!validateToken("token-1")) throw new Error("token-1 is a token");
