def test_vodozemac_is_what_nio_encrypts_with():
    import nio.crypto
    assert nio.crypto.ENCRYPTION_ENABLED
