<?php

declare(strict_types=1);

namespace Veil\Tests;

use Veil\Exception\InvalidRequestException;

/** Noise on values the application computed itself: the seed's noisyCount($trueCount). */
final class MechanismTest extends TestCase
{
    public function testLaplaceOnACountGivesAnIntegerNearItWithItsErrorBar(): void
    {
        $r = self::client()->laplace(1000, 0.5, 1, self::MECHANISMS);

        self::assertIsInt($r->values);
        self::assertSame('discrete_laplace', $r->mechanism);
        self::assertNear(1000.0, (float) $r->values, (float) $r->errorBar);
        self::assertSame(0.95, $r->errorBarLevel);
        self::assertSame('1/2', self::exactEpsilon($r->cost));
    }

    public function testLaplaceOnFloatsGivesFloatsInTheSameShape(): void
    {
        $r = self::client()->laplace([25.7, 1000.5], 1.0, 100, self::MECHANISMS);

        self::assertIsArray($r->values);
        self::assertCount(2, $r->values);
        self::assertSame('laplace', $r->mechanism);
        self::assertNear(25.7, (float) $r->values[0], (float) $r->errorBar);
        self::assertNear(1000.5, (float) $r->values[1], (float) $r->errorBar);
    }

    /**
     * 400 answers that are all "yes", at ε = 2 over two categories: each is kept with
     * probability e²/(e² + 1) = 0.8808, so the reported "yes" count lies within 4.5 standard
     * deviations (6.5) of 352.3 but for a chance below 7e-6.
     */
    public function testRandomizedResponseKeepsEachAnswerWithTheRightProbability(): void
    {
        $r = self::client()->randomizedResponse(array_fill(0, 400, 'yes'), ['yes', 'no'], 2, self::MECHANISMS);

        self::assertCount(400, $r->values);
        self::assertSame([], array_diff($r->values, ['yes', 'no']));
        $p = exp(2) / (exp(2) + 1);
        $yes = count(array_filter($r->values, static fn ($v) => $v === 'yes'));
        self::assertLessThanOrEqual(4.5 * sqrt(400 * $p * (1 - $p)), abs($yes - 400 * $p));
        self::assertSame('2', self::exactEpsilon($r->cost));
    }

    public function testANonFiniteSensitivityIsRefusedBeforeSending(): void
    {
        $this->expectException(InvalidRequestException::class);
        $this->expectExceptionMessage('sensitivity must be a finite number');
        self::client()->laplace(10, 1.0, NAN, self::MECHANISMS);
    }

    public function testANegativeSensitivityIsRefusedByTheService(): void
    {
        try {
            self::client()->laplace(10, 1.0, -1, self::MECHANISMS);
            self::fail('a negative sensitivity was accepted');
        } catch (InvalidRequestException $e) {
            self::assertSame('urn:veil:problem:invalid-argument', $e->type());
        }
    }
}
